"""torch_npu.npu._stream_check: the stream sanitizer's checks (torch.npu._sanitizer enables them).

- ``NPUSanitizerDispatchMode(event_handler)`` sees every op on npu tensors; its ``NPUArgumentHandler`` works out from
  the op's schema which storages it reads and writes (arguments annotated ``Tensor(a!)`` and fresh outputs are
  written, the others read, views touch no memory), and the mode hands them to the event handler as one kernel on the
  current stream of the op's device, with the Python stack of its launch.
- ``EventHandler`` finds data races: each stream carries a vector clock of the work it is ordered after (event records
  and waits, stream, event and device synchronizations reported through torch_npu.utils._npu_trace); an access that
  conflicts (a write with anything, a read with a write) with an earlier access from a stream it is not ordered after
  is reported with both ops, streams and stacks, and ``NPUSanitizerErrors`` is raised from the op that made it.
  Memory is tracked per storage; a new allocation forgets the history of its memory.
- ``NPURecordStreamHandler`` also finds missing ``record_stream`` calls (torch_npu's check): a storage used on a
  stream other than the one that created it (the stream of its first access) needs ``record_stream(that stream)``
  unless the creating stream is ordered after that use (``wait_stream``, ``wait_event``, a device synchronization).
  It checks at the storage's deallocation (each error printed and kept in ``record_stream_errors``) and on demand
  (``flush_record_stream_warnings()``).
"""

import enum
import functools
import inspect
import io
import os
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
from .. import npu_trace as _npu_trace
from . import _gpu_trace

StreamId = int
EventId = int
DataPtr = int
SeqNum = int

# Ops that read only their inputs' metadata (empty_like(x), new_zeros(x, ...)).
FACTORY_FUNCTION_REGEX = re.compile(r"aten::(new_\w+|\w+_like)")

SynchronizationError = _csan.SynchronizationError


def _stream_name(stream: StreamId) -> str:
    found = _C._stream_of_handle(stream)
    if found is None:
        return f"{stream:#x}"
    stream_id, device_index, _ = found
    return f"{stream:#x} (npu:{device_index} stream id {stream_id})"


# The sanitizer's own frames, left out of the stacks it reports.
_OWN_FILES = {__file__, _npu_trace.__file__, os.path.join(os.path.dirname(__file__), "_sanitizer.py")}


def _stack() -> traceback.StackSummary:
    stack = traceback.StackSummary.extract(traceback.walk_stack(inspect.currentframe()), lookup_lines=False)
    stack.reverse()  # walk_stack goes from the innermost frame out
    while stack and stack[-1].filename in _OWN_FILES:
        stack.pop()
    return stack


class AccessType(enum.Enum):
    READ = enum.auto()
    WRITE = enum.auto()

    def __str__(self) -> str:
        return "reading from" if self is AccessType.READ else "writing to"


@dataclass
class Access:
    """One kernel's access to one storage: the op's schema, the arguments that name it, whether it is the op's output,
    and the Python stack of the launch."""

    type: AccessType
    seq_num: SeqNum
    stream: StreamId
    operator: str
    aliases: list[str]
    is_output: bool
    stack_trace: traceback.StackSummary


class UnsynchronizedAccessError(SynchronizationError):
    """Two accesses to one storage from streams not ordered with each other, at least one a write."""

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
    torch.cuda._sanitizer.CUDASanitizerErrors, as torch_npu's."""


class MissingRecordStreamError(SynchronizationError):
    """A use of a storage from `usage_stream` that neither record_stream nor an ordering of the creating stream after
    it covers: the caching allocator could hand the memory out again while that use may still be running."""

    def __init__(self, data_ptr: DataPtr, allocation_stream: StreamId, usage_stream: StreamId, seq_num: SeqNum,
                 recorded_streams: set[StreamId]):
        super().__init__()
        self.data_ptr = data_ptr
        self.allocation_stream = allocation_stream
        self.usage_stream = usage_stream
        self.seq_num = seq_num
        self.recorded_streams = recorded_streams

    def __str__(self) -> str:
        creation, usage = _stream_name(self.allocation_stream), _stream_name(self.usage_stream)
        return (f"NPU sanitizer: storage {self.data_ptr:#x} created on {creation} was used on {usage} without "
                f"record_stream and without {creation} waiting for that use (fix: tensor.record_stream(usage stream), "
                f"or creation_stream.wait_stream(usage stream) before the tensor is freed)")


@dataclass
class _TensorInfo:
    allocation_stack_trace: Optional[traceback.StackSummary]
    reads: list[Access] = field(default_factory=list)
    write: Optional[Access] = None


class _StreamSynchronizations:
    """Vector clocks: for each stream, the last kernel of every stream it is ordered after; for each recorded event,
    its stream's clock at the record; for the host, what it has waited for (a stream first seen starts from it)."""

    def __init__(self) -> None:
        self.current: dict[StreamId, dict[StreamId, SeqNum]] = {}
        self.recorded: dict[EventId, dict[StreamId, SeqNum]] = {}
        self.host: dict[StreamId, SeqNum] = {}

    def _clock(self, stream: StreamId) -> dict[StreamId, SeqNum]:
        clock = self.current.get(stream)
        if clock is None:
            clock = self.current[stream] = dict(self.host)
        return clock

    @staticmethod
    def _merge(into: dict[StreamId, SeqNum], other: dict[StreamId, SeqNum]) -> None:
        for stream, seq_num in other.items():
            if into.get(stream, -1) < seq_num:
                into[stream] = seq_num

    def launch(self, stream: StreamId, seq_num: SeqNum) -> None:
        self._clock(stream)[stream] = seq_num

    def create_event(self, event: EventId) -> None:
        self.recorded[event] = {}

    def delete_event(self, event: EventId) -> None:
        self.recorded.pop(event, None)

    def record(self, event: EventId, stream: StreamId) -> None:
        self.recorded[event] = dict(self._clock(stream))

    def wait(self, stream: StreamId, event: EventId) -> None:
        self._merge(self._clock(stream), self.recorded.get(event, {}))

    def _host_waited(self, clock: dict[StreamId, SeqNum]) -> None:
        # Whatever the host launches from now on, on any stream, comes after what it waited for.
        self._merge(self.host, clock)
        for state in self.current.values():
            self._merge(state, self.host)

    def stream_synchronized(self, stream: StreamId) -> None:
        self._host_waited(dict(self._clock(stream)))

    def event_synchronized(self, event: EventId) -> None:
        self._host_waited(self.recorded.get(event, {}))

    def device_synchronized(self) -> None:
        everything: dict[StreamId, SeqNum] = {}
        for state in self.current.values():
            self._merge(everything, state)
        self._host_waited(everything)

    def is_ordered_after(self, stream: StreamId, seq_num: SeqNum, other: StreamId) -> bool:
        return self._clock(stream).get(other, -1) >= seq_num


class EventHandler:
    """The data-race check's state: each storage's last write and reads since, and the streams' ordering. Its
    ``_handle_*`` methods are the callbacks the sanitizer registers with torch_npu.utils._npu_trace."""

    def __init__(self) -> None:
        self.tensors: dict[DataPtr, _TensorInfo] = {}
        self.syncs = _StreamSynchronizations()
        self.seq_num: SeqNum = 0

    def _handle_kernel_start(self, stream: StreamId) -> SeqNum:
        """Numbers a kernel before it runs, so the events it records itself (a copy between devices orders the two
        devices' streams around the copy) count it."""
        self.seq_num += 1
        self.syncs.launch(stream, self.seq_num)
        return self.seq_num

    def _handle_kernel_launch(self, stream: StreamId, seq_num: SeqNum, read_only: set[DataPtr],
                              read_write: set[DataPtr], outputs: set[DataPtr], operator: str,
                              tensor_aliases: dict[DataPtr, list[str]]) -> list[SynchronizationError]:
        errors: list[SynchronizationError] = []
        stack = _stack()

        def check(data_ptr: DataPtr, current: Access, previous: Optional[Access], info: _TensorInfo) -> None:
            if previous is not None and not self.syncs.is_ordered_after(stream, previous.seq_num, previous.stream):
                errors.append(UnsynchronizedAccessError(data_ptr, info.allocation_stack_trace, current, previous))

        for data_ptr in read_only:
            info = self.tensors.setdefault(data_ptr, _TensorInfo(None))
            access = Access(AccessType.READ, seq_num, stream, operator, tensor_aliases[data_ptr], data_ptr in outputs,
                            stack)
            check(data_ptr, access, info.write, info)
            info.reads.append(access)
        for data_ptr in read_write:
            info = self.tensors.setdefault(data_ptr, _TensorInfo(None))
            access = Access(AccessType.WRITE, seq_num, stream, operator, tensor_aliases[data_ptr],
                            data_ptr in outputs, stack)
            if info.reads:
                for read in info.reads:
                    check(data_ptr, access, read, info)
            else:
                check(data_ptr, access, info.write, info)
            info.write = access
            info.reads = []
        return errors

    def _handle_memory_allocation(self, data_ptr: DataPtr) -> None:
        self.tensors[data_ptr] = _TensorInfo(_stack())

    def _handle_memory_deallocation(self, data_ptr: DataPtr) -> None:
        self.tensors.pop(data_ptr, None)

    def _handle_stream_creation(self, stream: StreamId) -> None:
        """A new stream starts from what the host has waited for (its clock is made at its first use)."""

    def _handle_event_creation(self, event: EventId) -> None:
        self.syncs.create_event(event)

    def _handle_event_deletion(self, event: EventId) -> None:
        self.syncs.delete_event(event)

    def _handle_event_record(self, event: EventId, stream: StreamId) -> None:
        self.syncs.record(event, stream)

    def _handle_event_wait(self, event: EventId, stream: StreamId) -> None:
        self.syncs.wait(stream, event)

    def _handle_device_synchronization(self) -> None:
        self.syncs.device_synchronized()

    def _handle_stream_synchronization(self, stream: StreamId) -> None:
        self.syncs.stream_synchronized(stream)

    def _handle_event_synchronization(self, event: EventId) -> None:
        self.syncs.event_synchronized(event)


@dataclass
class NPUTensorInfo:
    """A storage's streams: the one that created it (of its first access), the last use from each other stream, the
    streams given to record_stream."""

    allocation_stream: Optional[StreamId] = None
    uses: dict[StreamId, SeqNum] = field(default_factory=dict)
    recorded_streams: set[StreamId] = field(default_factory=set)


class NPURecordStreamHandler(EventHandler):
    """The data-race check and the missing-record_stream check."""

    def __init__(self) -> None:
        super().__init__()
        self._npu_tensors: dict[DataPtr, NPUTensorInfo] = {}
        self._record_stream_errors: list[MissingRecordStreamError] = []

    @property
    def record_stream_errors(self) -> list[MissingRecordStreamError]:
        """The errors found at deallocations. Reading them first waits until the kernels launched so far have run
        (without synchronizing in the sanitizer's view), so the deallocations of tensors those kernels still held when
        the host dropped them are checked too."""
        _npu_trace.deliver_allocator_records(settle_streams=self.syncs.current)
        return self._record_stream_errors

    def _handle_kernel_launch(self, stream: StreamId, seq_num: SeqNum, read_only: set[DataPtr],
                              read_write: set[DataPtr], outputs: set[DataPtr], operator: str,
                              tensor_aliases: dict[DataPtr, list[str]]) -> list[SynchronizationError]:
        for data_ptr in read_only | read_write:
            info = self._npu_tensors.setdefault(data_ptr, NPUTensorInfo())
            if info.allocation_stream is None:
                info.allocation_stream = stream
            elif stream != info.allocation_stream:
                info.uses[stream] = seq_num
        return super()._handle_kernel_launch(stream, seq_num, read_only, read_write, outputs, operator,
                                             tensor_aliases)

    def _get_record_stream_errors(self, data_ptr: DataPtr) -> list[MissingRecordStreamError]:
        info = self._npu_tensors.get(data_ptr)
        if info is None or info.allocation_stream is None:
            return []
        return [MissingRecordStreamError(data_ptr, info.allocation_stream, stream, seq_num,
                                         set(info.recorded_streams))
                for stream, seq_num in info.uses.items()
                if stream not in info.recorded_streams
                and not self.syncs.is_ordered_after(info.allocation_stream, seq_num, stream)]

    def flush_record_stream_warnings(self) -> list[MissingRecordStreamError]:
        """The uses from other streams of the storages alive now that still need record_stream: neither recorded nor
        followed by the creating stream (as of now). Each is printed to stderr and kept in record_stream_errors."""
        _npu_trace.deliver_allocator_records()
        errors = [error for data_ptr in self._npu_tensors for error in self._get_record_stream_errors(data_ptr)]
        for error in errors:
            print(error, file=sys.stderr)
        self._record_stream_errors.extend(errors)
        return errors

    def _handle_memory_allocation(self, data_ptr: DataPtr) -> None:
        super()._handle_memory_allocation(data_ptr)
        self._npu_tensors.pop(data_ptr, None)  # a new storage: its uses and recorded streams start afresh

    def _handle_memory_deallocation(self, data_ptr: DataPtr) -> None:
        for error in self._get_record_stream_errors(data_ptr):
            print(error, file=sys.stderr)
            self._record_stream_errors.append(error)
        self._npu_tensors.pop(data_ptr, None)
        super()._handle_memory_deallocation(data_ptr)

    def _handle_record_stream(self, data_ptr: DataPtr, stream: StreamId) -> None:
        self._npu_tensors.setdefault(data_ptr, NPUTensorInfo()).recorded_streams.add(stream)

    def _handle_erase_stream(self, data_ptr: DataPtr, stream: StreamId) -> None:
        info = self._npu_tensors.get(data_ptr)
        if info is not None:
            info.recorded_streams.discard(stream)


def _zip_arguments(schema: torch.FunctionSchema, args: tuple, kwargs: dict):
    yield from zip(schema.arguments, args)
    by_name = {argument.name: argument for argument in schema.arguments[len(args):]}
    for name, value in kwargs.items():
        if name in by_name:
            yield by_name[name], value


class NPUArgumentHandler:
    """The npu storages one op reads and writes, with the argument names that refer to each."""

    def __init__(self) -> None:
        self.dataptrs_read: set[DataPtr] = set()
        self.dataptrs_written: set[DataPtr] = set()
        self.outputs: set[DataPtr] = set()
        self.tensor_aliases: dict[DataPtr, list[str]] = {}
        self.write_device: Optional[int] = None
        self.read_device: Optional[int] = None

    @property
    def device(self) -> Optional[int]:
        """The device the op runs on: that of the first npu tensor it writes, else of the first it reads."""
        return self.write_device if self.write_device is not None else self.read_device

    def _handle_argument(self, value: Any, is_write: bool, metadata_only: bool, name: Optional[str] = None,
                         is_output: bool = False) -> None:
        if not isinstance(value, torch.Tensor) or value.device.type != "npu" or value.layout != torch.strided:
            return
        try:
            data_ptr = value.untyped_storage().data_ptr()  # per storage: views of one allocation share it
        except RuntimeError:  # a tensor without real memory (a FakeTensor while torch.compile traces)
            return
        if not data_ptr:  # empty: nothing to race on
            return
        if is_write:
            self.dataptrs_written.add(data_ptr)
            if self.write_device is None:
                self.write_device = value.device.index
        elif not metadata_only:
            self.dataptrs_read.add(data_ptr)
            if self.read_device is None:
                self.read_device = value.device.index
        aliases = self.tensor_aliases.setdefault(data_ptr, [])
        if name is not None:
            aliases.append(name)
        if is_output:
            self.outputs.add(data_ptr)

    def parse_inputs(self, schema: torch.FunctionSchema, args: tuple, kwargs: dict, *, is_factory: bool) -> None:
        for argument, value in _zip_arguments(schema, args, kwargs):
            alias = argument.alias_info
            is_write = alias is not None and alias.is_write
            metadata_only = is_factory or (alias is not None and not alias.is_write)
            pytree.tree_map_(functools.partial(self._handle_argument, is_write=is_write, metadata_only=metadata_only,
                                               name=argument.name), value)

    def parse_outputs(self, schema: torch.FunctionSchema, outputs: Any, *, is_factory: bool) -> None:
        """Records the op's outputs as written (is_factory, torch_npu's argument, changes nothing: a factory reads only
        its inputs' metadata, but writes its outputs)."""
        returns = schema.returns
        if not returns:  # in-place ops returning nothing (_foreach_add_, ...): their writes are the inputs'
            return
        values = (outputs,) if len(returns) == 1 else tuple(outputs)
        for ret, value in zip(returns, values):
            # A factory's output is fresh memory its kernel writes (zeros_like, new_ones), as torch_npu counts it;
            # only a returned view writes nothing.
            metadata_only = ret.alias_info is not None and not ret.alias_info.is_write
            pytree.tree_map_(functools.partial(self._handle_argument, is_write=not metadata_only,
                                               metadata_only=metadata_only, is_output=True), value)


def _current_stream_key(device: int) -> StreamId:
    stream_id, device_index, _ = _C._current_stream(device)
    return _gpu_trace.stream_key(device_index, stream_id)


class NPUSanitizerDispatchMode(TorchDispatchMode):
    """Records every op's accesses as one kernel on the current stream of the device of the tensors it writes (of
    those it reads if it writes none; for a copy between devices, the destination's)."""

    def __init__(self, event_handler: EventHandler):
        super().__init__()
        self.event_handler = event_handler
        self.args_handler: Optional[NPUArgumentHandler] = None

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        # torch.compile still compiles under the sanitizer: the compiled code's aten calls come here, and its C++
        # kernels through torch.npu._sanitizer.compiled_kernel_launch.
        return True

    def parse_inputs(self, schema: torch.FunctionSchema, args: tuple, kwargs: dict, is_factory: bool = False) -> None:
        self.args_handler.parse_inputs(schema, args, kwargs, is_factory=is_factory)

    def parse_outputs(self, schema: torch.FunctionSchema, outputs: Any, is_factory: bool = False) -> None:
        self.args_handler.parse_outputs(schema, outputs, is_factory=is_factory)

    def record_kernel(self, arguments: NPUArgumentHandler, operator: str, launch: Any) -> Any:
        """Runs launch() as one kernel on the current stream of the arguments' device, recording its accesses."""
        if arguments.device is None:
            return launch()
        _npu_trace.deliver_allocator_records()  # the frees before this kernel
        stream = _current_stream_key(arguments.device)
        seq_num = self.event_handler._handle_kernel_start(stream)
        result = launch()
        self.check_errors(arguments, operator, stream, seq_num)
        return result

    def check_errors(self, arguments: NPUArgumentHandler, operator: str, npu_stream: StreamId,
                     seq_num: SeqNum) -> None:
        errors = self.event_handler._handle_kernel_launch(
            npu_stream, seq_num, arguments.dataptrs_read - arguments.dataptrs_written, arguments.dataptrs_written,
            arguments.outputs, operator, arguments.tensor_aliases)
        if errors:
            for error in errors:
                print(error, file=sys.stderr)
            raise NPUSanitizerErrors(errors)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten.record_stream.default:
            # No kernel: the allocator's recordStream reports it (torch_npu.utils._npu_trace's record_stream), as do
            # the other callers of recordStream (collectives).
            return func(*args, **kwargs)
        schema = func._schema
        is_factory = bool(FACTORY_FUNCTION_REGEX.fullmatch(schema.name))
        self.args_handler = arguments = NPUArgumentHandler()
        self.parse_inputs(schema, args, kwargs, is_factory=is_factory)

        def run():
            outputs = func(*args, **kwargs)
            arguments.parse_outputs(schema, outputs, is_factory=is_factory)
            return outputs

        if arguments.device is not None:
            return self.record_kernel(arguments, str(schema), run)
        # Only fresh outputs (a factory with a device argument): the op runs where they are.
        outputs = run()
        return self.record_kernel(arguments, str(schema), lambda: outputs)
