"""torch.npu._memory_viz (torch_npu.npu._memory_viz): renders memory snapshots (torch.npu.memory._snapshot(), whose
format is torch.cuda's) as flame graphs, segment summaries, traces and the HTML plots; the functions are
torch.cuda._memory_viz's, which read only the snapshot."""

from torch.cuda._memory_viz import (  # noqa: F401
    Bytes,
    _block_extra,
    _block_extra_legacy,
    _format_size,
    _frame_filter,
    _frame_fmt,
    _frames_fmt,
    _report_free,
    _write_blocks,
    calc_active,
    compare,
    filter_alloc_free_pairs,
    format_flamegraph,
    memory,
    profile_plot,
    segment_plot,
    segments,
    segsum,
    trace,
    trace_plot,
)
