"""torch_npu.utils._path_manager.PathManager: the checked file-system helpers torch_npu's tools and tests use
(directories made with owner-only permissions, paths removed only when they are not symbolic links, inputs that must
be readable directories or files). Errors are RuntimeError naming the path, as torch_npu's."""

import os
import shutil


class PathManager:
    MAX_PATH_LENGTH = 4096
    DATA_DIR_AUTHORITY = 0o750
    DATA_FILE_AUTHORITY = 0o640

    @classmethod
    def _input_path_common_check(cls, path: str) -> None:
        if not isinstance(path, str) or not path:
            raise RuntimeError(f"Invalid path: {path!r}")
        if len(path) > cls.MAX_PATH_LENGTH:
            raise RuntimeError(f"Path length exceeds {cls.MAX_PATH_LENGTH}: {path[:64]}...")
        if os.path.islink(path):
            raise RuntimeError(f"Invalid path, it is a soft link: {path}")

    @classmethod
    def check_input_directory_path(cls, path: str) -> None:
        cls._input_path_common_check(path)
        if os.path.exists(path) and not os.path.isdir(path):
            raise RuntimeError(f"Invalid path, it is not a directory: {path}")

    @classmethod
    def check_input_file_path(cls, path: str) -> None:
        cls._input_path_common_check(path)
        if os.path.exists(path) and not os.path.isfile(path):
            raise RuntimeError(f"Invalid path, it is not a file: {path}")

    @classmethod
    def check_path_is_readable(cls, path: str) -> bool:
        return os.access(path, os.R_OK)

    @classmethod
    def check_path_is_writeable(cls, path: str) -> bool:
        return os.access(path, os.W_OK)

    @classmethod
    def check_directory_path_readable(cls, path: str) -> None:
        cls.check_input_directory_path(path)
        if not os.path.exists(path):
            raise RuntimeError(f"The path does not exist: {path}")
        if not cls.check_path_is_readable(path):
            raise RuntimeError(f"The path permission check failed, it is not readable: {path}")

    @classmethod
    def check_directory_path_writeable(cls, path: str) -> None:
        cls.check_input_directory_path(path)
        if not os.path.exists(path):
            raise RuntimeError(f"The path does not exist: {path}")
        if not cls.check_path_is_writeable(path):
            raise RuntimeError(f"The path permission check failed, it is not writeable: {path}")

    @classmethod
    def remove_path_safety(cls, path: str) -> None:
        """Removes a directory tree (nothing if it does not exist); refuses a symbolic link."""
        if os.path.islink(path):
            raise RuntimeError(f"Failed to remove path: {path}, it is a soft link")
        if os.path.exists(path):
            try:
                shutil.rmtree(path)
            except OSError as e:
                raise RuntimeError(f"Failed to remove path: {path}: {e}") from None

    @classmethod
    def remove_file_safety(cls, file: str) -> None:
        if os.path.islink(file):
            raise RuntimeError(f"Failed to remove file: {file}, it is a soft link")
        if os.path.exists(file):
            try:
                os.remove(file)
            except OSError as e:
                raise RuntimeError(f"Failed to remove file: {file}: {e}") from None

    @classmethod
    def make_dir_safety(cls, path: str) -> None:
        """Makes the directory and its parents (owner rwx, group r-x); an existing directory is left as it is."""
        cls._input_path_common_check(path)
        if os.path.isdir(path):
            return
        try:
            os.makedirs(path, mode=cls.DATA_DIR_AUTHORITY, exist_ok=True)
        except OSError as e:
            raise RuntimeError(f"Failed to create directory: {path}: {e}") from None

    @classmethod
    def create_file_safety(cls, path: str) -> None:
        cls._input_path_common_check(path)
        if os.path.exists(path):
            return
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, cls.DATA_FILE_AUTHORITY))
        except OSError as e:
            raise RuntimeError(f"Failed to create file: {path}: {e}") from None
