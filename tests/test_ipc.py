"""npu tensors shared between processes (issue 34 item 7; csrc/runtime/src/ipc.cpp, csrc/backend/ipc.h,
python/softnpu/multiprocessing): torch.multiprocessing sends an npu tensor as a handle to its device memory, which a
spawned process maps; writes on either side are seen by the other; CUDA IPC's lifetime rules (the sender's block
stays out of its cache while a receiver holds it; a receiver keeps it alive after the sender dropped it); storages
shared through _share_npu_ / _new_shared_npu; a forked child of an initialized parent refuses, as CUDA's does.

The spawned children run the functions below (spawn pickles them by name, importing this module); each child pays
torch's import, so the cases share one child where they can."""

import gc
import pickle

import pytest
import torch
import torch.multiprocessing as mp
import torch_npu

TIMEOUT = 120


def _receiver(inbox, outbox):
    # 1. A tensor, modified here in place: the sender sees it.
    t = inbox.get()
    outbox.put(("received", t.device.type, t.shape, t.cpu().tolist()))
    t.add_(100)
    torch.npu.synchronize()
    outbox.put("modified")
    # 2. A tensor the sender drops right after sending: this process keeps its memory alive.
    kept = inbox.get()
    outbox.put("got it")
    assert inbox.get() == "sender dropped it and reused its cache"
    outbox.put(("kept", kept.cpu().tolist()))
    del kept
    outbox.put("released")
    # 3. A storage shared by hand (torch's _share_cuda_ / _new_shared_cuda pattern, used by RL weight sync).
    handle = inbox.get()
    storage = torch.UntypedStorage._new_shared_npu(*handle)
    view = torch.empty(0, dtype=torch.float32, device="npu").set_(storage, 0, (4,), (1,))
    view.fill_(7.0)
    torch.npu.synchronize()
    outbox.put(("storage", storage.device.type, storage.nbytes()))
    # 4. A view of a larger tensor and a Parameter arrive as such, the Parameter with its format.
    view_of, param = inbox.get()
    outbox.put(("view", view_of.cpu().tolist(), view_of.storage_offset(), type(param).__name__, param.requires_grad,
                torch_npu.get_npu_format(param)))
    assert inbox.get() == "done"


def test_npu_tensors_through_a_queue_to_a_spawned_process():
    gc.collect()  # earlier tests' garbage, collected mid-test, would move memory_allocated under the checks below
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=_receiver, args=(inbox, outbox))
    child.start()
    try:
        t = torch.arange(6, dtype=torch.float32, device="npu").reshape(2, 3)
        inbox.put(t)
        assert outbox.get(timeout=TIMEOUT) == ("received", "npu", torch.Size([2, 3]), [[0, 1, 2], [3, 4, 5]])
        assert outbox.get(timeout=TIMEOUT) == "modified"
        assert t.cpu().tolist() == [[100, 101, 102], [103, 104, 105]]  # the receiver's write, seen here

        before = torch.npu.memory_allocated()
        kept = torch.full((1024,), 3.0, device="npu")
        inbox.put(kept)
        assert outbox.get(timeout=TIMEOUT) == "got it"
        del kept
        torch.npu.ipc_collect()
        # The block is still allocated (out of the cache): new tensors do not get it.
        assert torch.npu.memory_allocated() == before + 4608  # 4096 bytes + torch_npu's 32-byte pad, rounded to 512
        others = [torch.zeros(1024, device="npu") for _ in range(4)]
        torch.npu.synchronize()
        inbox.put("sender dropped it and reused its cache")
        assert outbox.get(timeout=TIMEOUT) == ("kept", [3.0] * 1024)
        assert outbox.get(timeout=TIMEOUT) == "released"
        del others
        torch.npu.ipc_collect()
        assert torch.npu.memory_allocated() == before  # freed once the receiver let go

        base = torch.zeros(16, device="npu")
        storage = base[4:8].untyped_storage()  # a view's storage is its base's: all 16 elements
        handle = storage._share_npu_()
        assert handle[0] == 0 and isinstance(handle[1], bytes) and handle[2] == storage.nbytes() == 64
        inbox.put(handle)  # plain bytes and ints: the storage travels as its description
        assert outbox.get(timeout=TIMEOUT) == ("storage", "npu", 64)
        assert base.cpu().tolist() == [7.0] * 4 + [0.0] * 12

        big = torch.arange(10, dtype=torch.float32, device="npu")
        param = torch.nn.Parameter(torch_npu.npu_format_cast(torch.ones(3, 4, device="npu"), 0))  # NCHW
        inbox.put((big[5:8], param))
        assert outbox.get(timeout=TIMEOUT) == ("view", [5.0, 6.0, 7.0], 5, "Parameter", True, 0)
        inbox.put("done")
        child.join(TIMEOUT)
        assert child.exitcode == 0
    finally:
        if child.is_alive():
            child.kill()


def test_reducers_and_refusals():
    from multiprocessing.reduction import ForkingPickler

    from torch_npu.multiprocessing.reductions import rebuild_npu_tensor, reduce_storage, reduce_tensor

    t = torch.ones(4, device="npu")
    rebuild, args = reduce_tensor(t)
    assert rebuild is rebuild_npu_tensor and args[6] == 0 and args[8] == 16
    assert ForkingPickler.dumps(t)  # registered with multiprocessing's pickler
    # As CUDA's: a storage alone is not picklable (send a tensor), nor a non-leaf tensor that requires grad.
    with pytest.raises(RuntimeError, match="Cannot pickle NPU storage; try pickling a NPU tensor instead"):
        reduce_storage(t.untyped_storage())
    with pytest.raises(RuntimeError, match="Cowardly refusing to serialize non-leaf tensor"):
        reduce_tensor(torch.ones(2, device="npu", requires_grad=True) * 2)
    # A process cannot open its own handle (CUDA's rule): send it to another process.
    with pytest.raises(RuntimeError, match="exported by this process"):
        torch.UntypedStorage._new_shared_npu(*t.untyped_storage()._share_npu_())
    # An empty tensor travels without memory.
    empty = pickle.loads(ForkingPickler.dumps(torch.empty(0, device="npu")))
    assert empty.device.type == "npu" and empty.numel() == 0
    # CPU tensors still go torch's way.
    assert ForkingPickler.dumps(torch.ones(2))


def _forked_receiver(inbox, outbox):
    try:
        inbox.get(timeout=TIMEOUT)
        outbox.put("received")
    except Exception as e:  # noqa: BLE001 - the message is the result
        outbox.put(f"{type(e).__name__}: {e}")


def test_a_forked_child_of_an_initialized_parent_cannot_receive():
    torch.npu.synchronize()  # the parent's device is initialized
    ctx = mp.get_context("fork")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=_forked_receiver, args=(inbox, outbox))
    child.start()
    try:
        inbox.put(torch.ones(2, device="npu"))
        message = outbox.get(timeout=TIMEOUT)
        assert message.startswith("RuntimeError: Cannot re-initialize NPU in forked subprocess"), message
        child.join(TIMEOUT)
    finally:
        if child.is_alive():
            child.kill()


EXPANDABLE = """
import torch, torch_npu
import torch.multiprocessing as mp
import test_ipc
if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=test_ipc._expandable_receiver, args=(inbox, outbox))
    child.start()
    t = torch.arange(1000, dtype=torch.float32, device="npu")
    assert all(s["is_expandable"] for s in torch.npu.memory_snapshot())
    inbox.put(t[10:20])
    print(outbox.get(timeout=120))
    child.join(120)  # the child has negated it and synchronized
    print(t[10:20].cpu().tolist())
    print("exit", child.exitcode)
"""


def _expandable_receiver(inbox, outbox):
    t = inbox.get()
    outbox.put(t.cpu().tolist())
    t.mul_(-1)
    torch.npu.synchronize()


def test_sharing_with_expandable_segments(tmp_path):
    # The caching allocator's expandable segments are reservations of the runtime, exported whole.
    from conftest import REPO, run_python

    script = tmp_path / "expandable.py"
    script.write_text(EXPANDABLE)
    result = run_python(f"import runpy, sys; sys.path.insert(0, {str(REPO / 'tests')!r}); "
                        f"runpy.run_path({str(script)!r}, run_name='__main__')",
                        env={"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"})
    assert result.stdout.splitlines()[-3:] == [str([float(i) for i in range(10, 20)]),
                                                str([-float(i) for i in range(10, 20)]), "exit 0"]
