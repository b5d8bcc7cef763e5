"""What the GPU's power management is doing, read through NVML (the driver's libnvidia-ml, by
ctypes; no package needed): the energy counter, the SM clock, the power drawn, and whether the
clock is held down by the power cap. bench.sustained reports them beside its times: back to
back, a GPU can sit at its power cap, and then a call's time is its energy over the cap.
"""
import ctypes
import functools

SM_CLOCK = 1            # nvmlClockType_t NVML_CLOCK_SM
POWER_CAP_REASON = 0x4  # nvmlClocksEventReasonSwPowerCap: the clock is lowered to hold the power limit
FIELDS = ("energy_mj", "sm_mhz", "power_w", "power_capped")


@functools.lru_cache(maxsize=None)
def _nvml(pci_bus_id=None):
    """(library, device handle) of the GPU at ``pci_bus_id`` (as CUDA gives it, e.g.
    "0000:19:00.0"; NVML numbers GPUs in its own order, which CUDA_VISIBLE_DEVICES does not
    change), or of NVML's only GPU where no id is given or the id is not found and there is one
    GPU; None where NVML cannot be loaded or read."""
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    handle, count = ctypes.c_void_p(), ctypes.c_uint()
    if lib.nvmlInit_v2():
        return None
    if pci_bus_id and not lib.nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id.encode(), ctypes.byref(handle)):
        return lib, handle
    if (lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) or count.value != 1
            or lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle))):
        return None
    return lib, handle


def sample(pci_bus_id=None):
    """{"energy_mj", "sm_mhz", "power_w", "power_capped"} of the GPU at ``pci_bus_id`` now (see
    _nvml); a value NVML does not give is None (and all are where NVML cannot be read)."""
    got = dict.fromkeys(FIELDS)
    nvml = _nvml(pci_bus_id)
    if nvml is None:
        return got
    lib, handle = nvml
    energy, clock, power, reasons = ctypes.c_ulonglong(), ctypes.c_uint(), ctypes.c_uint(), ctypes.c_ulonglong()
    if not lib.nvmlDeviceGetTotalEnergyConsumption(handle, ctypes.byref(energy)):
        got["energy_mj"] = energy.value
    if not lib.nvmlDeviceGetClockInfo(handle, SM_CLOCK, ctypes.byref(clock)):
        got["sm_mhz"] = clock.value
    if not lib.nvmlDeviceGetPowerUsage(handle, ctypes.byref(power)):
        got["power_w"] = power.value / 1000
    why = (getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None)          # drivers 535 and newer
           or getattr(lib, "nvmlDeviceGetCurrentClocksThrottleReasons", None))   # its older name
    if why is not None and not why(handle, ctypes.byref(reasons)):
        got["power_capped"] = bool(reasons.value & POWER_CAP_REASON)
    return got
