"""torch_npu.utils.utils's log printers: ``<local time>(<pid>)-[LEVEL] message`` on stdout, as torch_npu prints the
sanitizer's and the kernel check's messages."""

import os
import time


def _print_log(level: str, msg: str) -> None:
    now = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
    print(f"{now}({os.getpid()})-[{level}] {msg}")


def _print_info_log(info_msg: str) -> None:
    _print_log("INFO", info_msg)


def _print_warn_log(warn_msg: str) -> None:
    _print_log("WARNING", warn_msg)


def _print_error_log(error_msg: str) -> None:
    _print_log("ERROR", error_msg)
