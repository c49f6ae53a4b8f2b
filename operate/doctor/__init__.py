"""`ascend-router doctor`: is this machine ready to serve on Ascend NPUs, and if not, why.

`run.run_doctor` gathers the checks; every probe of the machine (commands, files, environment,
torch_npu, Ray) is injectable through `run.DoctorContext`, so the checks are tested against
recorded outputs.
"""
