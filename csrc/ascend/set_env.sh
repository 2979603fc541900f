# softnpu's CANN toolkit tree, as CANN's ascend-toolkit/set_env.sh: `source <this file>` exports the variables CANN's
# does, pointing at this tree (importing torch_npu or softnpu sets them too when ASCEND_HOME_PATH is unset).
_softnpu_toolkit="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)/latest"
export ASCEND_TOOLKIT_HOME="${_softnpu_toolkit}"
export ASCEND_HOME_PATH="${_softnpu_toolkit}"
export ASCEND_OPP_PATH="${_softnpu_toolkit}/opp"
export ASCEND_AICPU_PATH="${_softnpu_toolkit}"
export LD_LIBRARY_PATH="${_softnpu_toolkit}/lib64${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
unset _softnpu_toolkit
