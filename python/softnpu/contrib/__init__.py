"""softnpu.contrib (torch_npu.contrib): tools beyond torch.npu's API.

``transfer_to_npu`` is not imported here: importing it patches torch for the whole process, so only code that asks
for it by name gets it.
"""
