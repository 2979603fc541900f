"""torch.npu._sanitizer: finds unsynchronized accesses to npu tensors from different streams, as torch.cuda._sanitizer
(CSAN) does for CUDA.

Enable it with ``TORCH_NPU_SANITIZER=1`` or by calling ``enable_npu_sanitizer()`` (best at the start of the program).
Every op on npu tensors is then recorded with the stream it runs on, which tensors' memory it reads and which it
writes (from the op's schema: arguments annotated ``Tensor(a!)`` and fresh outputs are written, the others read, views
touch no memory), and the Python stack of its launch; so is every kernel compiled by torch.compile (const pointer
arguments read, the others written). The backend reports every event record and wait, stream, event
and device synchronization and allocation (csrc/backend/gpu_trace.h, through c10's GPUTrace into ``_gpu_trace``), so
each stream carries a vector clock of the work it is ordered after. An access that conflicts (a write with anything,
or a read with a write) with an earlier access from another stream it is not ordered after is a data race: both
accesses are printed to stderr, with their ops, streams, arguments and stacks, and ``NPUSanitizerErrors`` is raised
from the op that made the second access.

Memory is tracked per storage (an allocation): accesses to different parts of one storage from two unordered
streams are reported too. A new allocation forgets the history of its memory: the caching allocator hands a block to
a stream only after every stream that used it is done with it (``record_stream``).

Missing ``record_stream`` calls are found too (torch_npu's check): a storage used on a stream other than the one that
created it (the stream of its first access) needs ``record_stream(that stream)`` unless the creating stream is ordered
after that use (``wait_stream``, ``wait_event``, a device synchronization). ``event_handler.
flush_record_stream_warnings()`` returns a ``MissingRecordStreamWarning`` for each such use not covered. """

import enum
import inspect
import io
import re
import sys
import textwrap
import traceback
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
import torch.cuda._sanitizer as _csan
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from .. import _C
from . import _gpu_trace

StreamKey = int
EventKey = int
DataPtr = int
SeqNum = int

# Ops that read only their inputs' metadata (empty_like(x), new_zeros(x, ...)).
_FACTORY_FUNCTION = re.compile(r"aten::(new_\w+|\w+_like)")


def _stream_name(stream: StreamKey) -> str:
    found = _C._stream_of_handle(stream)
    if found is None:
        return f"{stream:#x}"
    stream_id, device_index, _ = found
    return f"{stream:#x} (npu:{device_index} stream id {stream_id})"


class AccessType(enum.Enum):
    READ = enum.auto()
    WRITE = enum.auto()

    def __str__(self) -> str:
        return "reading from" if self is AccessType.READ else "writing to"


@dataclass
class Access:
    """One kernel's access to one tensor's memory: the op's schema, the arguments that name the tensor, whether it is
    the op's output, and the Python stack of the launch."""

    type: AccessType
    seq_num: SeqNum
    stream: StreamKey
    operator: str
    aliases: list[str]
    is_output: bool
    stack_trace: traceback.StackSummary


class SynchronizationError(Exception):
    """Base class of the errors the npu sanitizer detects."""


class UnsynchronizedAccessError(SynchronizationError):
    """Two accesses to one tensor's memory from streams not ordered with each other, at least one a write."""

    def __init__(self, data_ptr: DataPtr, allocation_stack_trace: Optional[traceback.StackSummary],
                 current_access: Access, previous_access: Access):
        super().__init__()
        self.data_ptr = data_ptr
        self.allocation_stack_trace = allocation_stack_trace
        self.current_access = current_access
        self.previous_access = previous_access

    def __str__(self) -> str:
        message = io.StringIO()

        def format_access(access: Access) -> None:
            message.write(f"{access.operator}\n{access.type}")
            if access.aliases:
                message.write(" argument(s) " + ", ".join(access.aliases))
                if access.is_output:
                    message.write(", and to")
            if access.is_output:
                message.write(" the output")
            message.write(f"\nWith stack trace:\n{''.join(access.stack_trace.format())}\n")

        message.write(textwrap.dedent(f"""\
            ============================
            NPU sanitizer detected a possible data race on tensor with data pointer {self.data_ptr}
            Access by stream {_stream_name(self.current_access.stream)} during kernel:
            """))
        format_access(self.current_access)
        message.write(f"Previous access by stream {_stream_name(self.previous_access.stream)} during kernel:\n")
        format_access(self.previous_access)
        if self.allocation_stack_trace:
            message.write(f"Tensor was allocated with stack trace:\n{''.join(self.allocation_stack_trace.format())}")
        else:
            message.write("Trace for tensor allocation not found.")
        return message.getvalue()


class NPUSanitizerErrors(_csan.CUDASanitizerErrors):
    """Raised by the op that made the second access of one or more data races (the list is in ``errors``); a
    torch.cuda._sanitizer.CUDASanitizerErrors, as torch_npu's tests expect."""

    def __init__(self, errors: list[SynchronizationError]):
        super().__init__(errors)


@dataclass
class _TensorInfo:
    allocation_stack_trace: Optional[traceback.StackSummary]
    reads: list[Access] = field(default_factory=list)
    write: Optional[Access] = None


@dataclass
class _StreamUses:
    """A storage's streams: the one that created it, the last use from each other stream, the streams given to
    record_stream."""

    creation_stream: Optional[StreamKey] = None
    uses: dict[StreamKey, SeqNum] = field(default_factory=dict)
    recorded_streams: set[StreamKey] = field(default_factory=set)


@dataclass
class MissingRecordStreamWarning:
    """A use of a storage from `usage_stream` that neither record_stream nor an ordering of the creating stream after
    it covers: the caching allocator could hand the memory out again while that use may still be running."""

    data_ptr: DataPtr
    creation_stream: StreamKey
    usage_stream: StreamKey
    seq_num: SeqNum

    def __str__(self) -> str:
        creation, usage = _stream_name(self.creation_stream), _stream_name(self.usage_stream)
        return (f"NPU sanitizer: storage {self.data_ptr:#x} created on {creation} was used on {usage} without "
                f"record_stream and without {creation} waiting for that use")


class _StreamSynchronizations:
    """Vector clocks: for each stream, the last kernel of every stream it is ordered after; for each recorded event,
    its stream's clock at the record; for the host, what it has waited for (a stream first seen starts from it)."""

    def __init__(self) -> None:
        self.current: dict[StreamKey, dict[StreamKey, SeqNum]] = {}
        self.recorded: dict[EventKey, dict[StreamKey, SeqNum]] = {}
        self.host: dict[StreamKey, SeqNum] = {}

    def _clock(self, stream: StreamKey) -> dict[StreamKey, SeqNum]:
        clock = self.current.get(stream)
        if clock is None:
            clock = self.current[stream] = dict(self.host)
        return clock

    @staticmethod
    def _merge(into: dict[StreamKey, SeqNum], other: dict[StreamKey, SeqNum]) -> None:
        for stream, seq_num in other.items():
            if into.get(stream, -1) < seq_num:
                into[stream] = seq_num

    def launch(self, stream: StreamKey, seq_num: SeqNum) -> None:
        self._clock(stream)[stream] = seq_num

    def create_event(self, event: EventKey) -> None:
        self.recorded[event] = {}

    def delete_event(self, event: EventKey) -> None:
        self.recorded.pop(event, None)

    def record(self, event: EventKey, stream: StreamKey) -> None:
        self.recorded[event] = dict(self._clock(stream))

    def wait(self, stream: StreamKey, event: EventKey) -> None:
        self._merge(self._clock(stream), self.recorded.get(event, {}))

    def _host_waited(self, clock: dict[StreamKey, SeqNum]) -> None:
        # Whatever the host launches from now on, on any stream, comes after what it waited for.
        self._merge(self.host, clock)
        for state in self.current.values():
            self._merge(state, self.host)

    def stream_synchronized(self, stream: StreamKey) -> None:
        self._host_waited(dict(self._clock(stream)))

    def event_synchronized(self, event: EventKey) -> None:
        self._host_waited(self.recorded.get(event, {}))

    def device_synchronized(self) -> None:
        everything: dict[StreamKey, SeqNum] = {}
        for state in self.current.values():
            self._merge(everything, state)
        self._host_waited(everything)

    def is_ordered_after(self, stream: StreamKey, seq_num: SeqNum, other: StreamKey) -> bool:
        return self._clock(stream).get(other, -1) >= seq_num


def _stack() -> traceback.StackSummary:
    stack = traceback.StackSummary.extract(traceback.walk_stack(inspect.currentframe()), lookup_lines=False)
    stack.reverse()  # walk_stack goes from the innermost frame out
    while stack and stack[-1].filename == __file__:  # the sanitizer's own frames
        stack.pop()
    return stack


class EventHandler:
    """The sanitizer's state: each tensor's last write and reads since, and the streams' ordering."""

    def __init__(self) -> None:
        self.tensors: dict[DataPtr, _TensorInfo] = {}
        self.syncs = _StreamSynchronizations()
        self.seq_num: SeqNum = 0
        self._npu_tensors: dict[DataPtr, _StreamUses] = {}
        self.record_stream_errors: list[MissingRecordStreamWarning] = []

    def _use(self, data_ptr: DataPtr, stream: StreamKey, seq_num: SeqNum) -> None:
        uses = self._npu_tensors.setdefault(data_ptr, _StreamUses())
        if uses.creation_stream is None:
            uses.creation_stream = stream
        elif stream != uses.creation_stream:
            uses.uses[stream] = seq_num

    def _record_stream(self, data_ptr: DataPtr, stream: StreamKey) -> None:
        self._npu_tensors.setdefault(data_ptr, _StreamUses()).recorded_streams.add(stream)

    def flush_record_stream_warnings(self) -> list[MissingRecordStreamWarning]:
        """The uses from other streams that still need record_stream: neither recorded nor followed by the creating
        stream (as of now)."""
        warnings = []
        for data_ptr, info in self._npu_tensors.items():
            for stream, seq_num in info.uses.items():
                if stream in info.recorded_streams:
                    continue
                if not self.syncs.is_ordered_after(info.creation_stream, seq_num, stream):
                    warnings.append(MissingRecordStreamWarning(data_ptr, info.creation_stream, stream, seq_num))
        return warnings

    def _launch(self, stream: StreamKey) -> SeqNum:
        self.seq_num += 1
        self.syncs.launch(stream, self.seq_num)
        return self.seq_num

    def _accesses(self, stream: StreamKey, seq_num: SeqNum, read_only: set[DataPtr], written: set[DataPtr],
                  outputs: set[DataPtr], operator: str, aliases: dict[DataPtr, list[str]]) -> list[SynchronizationError]:
        errors: list[SynchronizationError] = []
        stack = _stack()

        def check(data_ptr: DataPtr, current: Access, previous: Optional[Access], info: _TensorInfo) -> None:
            if previous is not None and not self.syncs.is_ordered_after(stream, previous.seq_num, previous.stream):
                errors.append(UnsynchronizedAccessError(data_ptr, info.allocation_stack_trace, current, previous))

        for data_ptr in read_only | written:
            self._use(data_ptr, stream, seq_num)
        for data_ptr in read_only:
            info = self.tensors.setdefault(data_ptr, _TensorInfo(None))
            access = Access(AccessType.READ, seq_num, stream, operator, aliases[data_ptr], data_ptr in outputs, stack)
            check(data_ptr, access, info.write, info)
            info.reads.append(access)
        for data_ptr in written:
            info = self.tensors.setdefault(data_ptr, _TensorInfo(None))
            access = Access(AccessType.WRITE, seq_num, stream, operator, aliases[data_ptr], data_ptr in outputs, stack)
            if info.reads:
                for read in info.reads:
                    check(data_ptr, access, read, info)
            else:
                check(data_ptr, access, info.write, info)
            info.write = access
            info.reads = []
        return errors

    def _memory_allocation(self, data_ptr: DataPtr) -> None:
        self.tensors[data_ptr] = _TensorInfo(_stack())
        self._npu_tensors.pop(data_ptr, None)  # a new storage: its uses and recorded streams start afresh

    def _event_creation(self, event: EventKey) -> None:
        self.syncs.create_event(event)

    def _event_deletion(self, event: EventKey) -> None:
        self.syncs.delete_event(event)

    def _event_record(self, event: EventKey, stream: StreamKey) -> None:
        self.syncs.record(event, stream)

    def _event_wait(self, event: EventKey, stream: StreamKey) -> None:
        self.syncs.wait(stream, event)

    def _device_synchronization(self) -> None:
        self.syncs.device_synchronized()

    def _stream_synchronization(self, stream: StreamKey) -> None:
        self.syncs.stream_synchronized(stream)

    def _event_synchronization(self, event: EventKey) -> None:
        self.syncs.event_synchronized(event)


def _zip_arguments(schema: torch.FunctionSchema, args: tuple, kwargs: dict):
    yield from zip(schema.arguments, args)
    by_name = {argument.name: argument for argument in schema.arguments[len(args):]}
    for name, value in kwargs.items():
        if name in by_name:
            yield by_name[name], value


class _Arguments:
    """The npu storages one op reads and writes, with the argument names that refer to each."""

    def __init__(self) -> None:
        self.read: set[DataPtr] = set()
        self.written: set[DataPtr] = set()
        self.outputs: set[DataPtr] = set()
        self.aliases: dict[DataPtr, list[str]] = {}
        self.write_device: Optional[int] = None
        self.read_device: Optional[int] = None

    @property
    def device(self) -> Optional[int]:
        """The device the op runs on: that of the first npu tensor it writes, else of the first it reads."""
        return self.write_device if self.write_device is not None else self.read_device

    def add(self, value: Any, is_write: bool, metadata_only: bool, name: Optional[str] = None,
            is_output: bool = False) -> None:
        if not isinstance(value, torch.Tensor) or value.device.type != "npu" or value.layout != torch.strided:
            return
        try:
            data_ptr = value.untyped_storage().data_ptr()
        except RuntimeError:  # a tensor without real memory (a FakeTensor while torch.compile traces)
            return
        if not data_ptr:  # empty: nothing to race on
            return
        if is_write:
            self.written.add(data_ptr)
            if self.write_device is None:
                self.write_device = value.device.index
        elif not metadata_only:
            self.read.add(data_ptr)
            if self.read_device is None:
                self.read_device = value.device.index
        aliases = self.aliases.setdefault(data_ptr, [])
        if name is not None:
            aliases.append(name)
        if is_output:
            self.outputs.add(data_ptr)

    def parse_inputs(self, schema: torch.FunctionSchema, args: tuple, kwargs: dict, is_factory: bool) -> None:
        for argument, value in _zip_arguments(schema, args, kwargs):
            alias = argument.alias_info
            is_write = alias is not None and alias.is_write
            metadata_only = is_factory or (alias is not None and not alias.is_write)
            pytree.tree_map_(lambda v: self.add(v, is_write, metadata_only, argument.name), value)

    def parse_outputs(self, schema: torch.FunctionSchema, outputs: Any, is_factory: bool) -> None:
        returns = schema.returns
        if not returns:  # in-place ops returning nothing (_foreach_add_, ...): their writes are the inputs'
            return
        values = (outputs,) if len(returns) == 1 else tuple(outputs)
        for ret, value in zip(returns, values):
            metadata_only = is_factory or (ret.alias_info is not None and not ret.alias_info.is_write)
            pytree.tree_map_(lambda v: self.add(v, not metadata_only, metadata_only, is_output=True), value)


def _current_stream_key(device: int) -> StreamKey:
    stream_id, device_index, _ = _C._current_stream(device)
    return _gpu_trace.stream_key(device_index, stream_id)


class NPUSanitizerDispatchMode(TorchDispatchMode):
    """Records every op's accesses on the stream it runs on: the current stream of the device of the tensors it
    writes (of those it reads if it writes none; for a copy between devices, the destination's)."""

    def __init__(self) -> None:
        self.event_handler = EventHandler()
        torch._C._activate_gpu_trace()
        handler = self.event_handler
        _gpu_trace.register_callback_for_event_creation(handler._event_creation)
        _gpu_trace.register_callback_for_event_deletion(handler._event_deletion)
        _gpu_trace.register_callback_for_event_record(handler._event_record)
        _gpu_trace.register_callback_for_event_wait(handler._event_wait)
        _gpu_trace.register_callback_for_memory_allocation(handler._memory_allocation)
        _gpu_trace.register_callback_for_device_synchronization(handler._device_synchronization)
        _gpu_trace.register_callback_for_stream_synchronization(handler._stream_synchronization)
        _gpu_trace.register_callback_for_event_synchronization(handler._event_synchronization)

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        # torch.compile still compiles under the sanitizer: the compiled code's aten calls come here, and its C++
        # kernels through compiled_kernel_launch.
        return True

    def _record(self, arguments: "_Arguments", operator: str, launch):
        """Runs launch() as one kernel on the current stream of the arguments' device, recording its accesses."""
        if arguments.device is None:
            return launch()
        stream = _current_stream_key(arguments.device)
        # The number is taken before the kernel runs, so the events it records itself (a copy between devices orders
        # the two devices' streams around the copy) count it.
        seq_num = self.event_handler._launch(stream)
        result = launch()
        errors = self.event_handler._accesses(stream, seq_num, arguments.read - arguments.written, arguments.written,
                                              arguments.outputs, operator, arguments.aliases)
        if errors:
            for error in errors:
                print(error, file=sys.stderr)
            raise NPUSanitizerErrors(errors)
        return result

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten.record_stream.default:  # bookkeeping of the allocator, no kernel
            tensor, stream = args[0], args[1]
            if tensor.device.type == "npu":
                self.event_handler._record_stream(tensor.untyped_storage().data_ptr(),
                                                  _gpu_trace.stream_key(stream.device_index, stream.stream_id))
            return func(*args, **kwargs)
        schema = func._schema
        is_factory = bool(_FACTORY_FUNCTION.fullmatch(schema.name))
        arguments = _Arguments()
        arguments.parse_inputs(schema, args, kwargs, is_factory)
        if arguments.device is not None:
            return self._record(arguments, str(schema), lambda: self._call(func, args, kwargs, schema, arguments,
                                                                            is_factory))
        # Only fresh outputs (a factory with a device argument): the op runs where they are.
        outputs = func(*args, **kwargs)
        arguments.parse_outputs(schema, outputs, is_factory)
        return self._record(arguments, str(schema), lambda: outputs)

    @staticmethod
    def _call(func, args, kwargs, schema, arguments, is_factory):
        outputs = func(*args, **kwargs)
        arguments.parse_outputs(schema, outputs, is_factory)
        return outputs


class NPUSanitizer:
    """Holds the dispatch mode for the rest of the program once enabled (as torch.cuda._sanitizer.CUDASanitizer)."""

    def __init__(self) -> None:
        self.dispatch: Optional[NPUSanitizerDispatchMode] = None
        self.event_handler: Optional[EventHandler] = None
        self.enabled = False

    def enable(self) -> None:
        if self.enabled:
            return
        if self.dispatch is None:
            self.dispatch = NPUSanitizerDispatchMode()
        self.event_handler = self.dispatch.event_handler
        self.dispatch.__enter__()
        self.enabled = True

    def disable(self) -> None:
        if self.enabled:
            self.dispatch.__exit__(None, None, None)
            self.enabled = False

    def __del__(self) -> None:
        # At interpreter exit the modules this needs may be gone already.
        if sys is not None and not sys.is_finalizing() and self.enabled:
            self.disable()


def compiled_kernel_launch(launch, kernel_name: str, device: int, argtypes):
    """The binding of a kernel compiled by torch.compile (softnpu.inductor.launch), recorded by the sanitizer when it
    is enabled: the kernel writes the tensors it takes as non-const pointers and reads those it takes as const."""
    if not npu_sanitizer.enabled:
        return launch
    pointers = [t.strip().endswith("*") for t in argtypes]
    written = [p and not t.strip().startswith("const ") for p, t in zip(pointers, argtypes)]
    operator = f"compiled kernel {kernel_name}({', '.join(argtypes)})"

    def sanitized(*args):
        arguments = _Arguments()
        for i, value in enumerate(args):
            if pointers[i]:
                arguments.add(value, written[i], False, f"arg{i}")
        if arguments.device is None:
            arguments.write_device = device
        return npu_sanitizer.dispatch._record(arguments, operator, lambda: launch(*args))

    return sanitized


def enable_npu_sanitizer() -> None:
    """Enables the sanitizer: from now on every op on npu tensors is checked for unsynchronized accesses from
    different streams; each data race found is printed to stderr with the stack traces of both accesses, and
    NPUSanitizerErrors is raised. Enable it at the start of the program: accesses before it are not known."""
    npu_sanitizer.enable()


npu_sanitizer = NPUSanitizer()
