"""The machine's accelerators, by vendor: which devices there are (each vendor's own tool, its
output parsed), how a run is limited to some of them (each vendor's own variable), how much of
their memory a run used, and the CPU cores a run may be pinned to when there is no accelerator.

    device     Device, and running a vendor tool under a time limit (no answer is a reason)
    nvidia     nvidia-smi
    amd        amd-smi, else rocm-smi
    intel      xpu-smi
    apple      Apple silicon: one MPS device (sysctl)
    cores      CPU cores as slots: affinity and thread counts
    machine    which vendor `auto` means here, every vendor's devices, a slot's environment
"""
