"""The child process's GPU memory: every buffer inside guard zones, the outputs filled with a
NaN poison, and a scrambler for shared memory. Each bit pattern below is a quiet NaN with a
payload of its own; the GPU's arithmetic never makes them (a NaN it computes is 0x7fffffff),
so each says where a value came from."""
import numpy as np

POISON_BITS = 0x7FC0DEAD             # output elements before the kernel runs
UNTOUCHED_BITS = 0x7FC0A1A1          # output elements the kernel must leave alone (t2 > t)
OUT_GUARD_BITS = 0x7FC0FEED          # the guard zones around each output
IN_GUARD_BITS = 0x7FC0BEAD           # the guard zones around each input
GUARD_FLOATS = 16384                 # 64 KiB before and after every buffer


def host_template(body_bits, guard_bits, guard):
    """body_bits (uint32) with ``guard`` floats of guard_bits before and after."""
    n = body_bits.size
    h = np.empty(n + 2 * guard, np.uint32)
    h[:guard] = guard_bits
    h[guard + n:] = guard_bits
    h[guard:guard + n] = body_bits
    return h


def above_diagonal(T):
    """True at (t, t2) with t2 > t: what a causal kernel must leave alone."""
    return ~np.tril(np.ones((T, T), bool))


def output_init(shape, init):
    """An output's bits before the run: the poison, and when causal the marker above the
    diagonal, which the kernel must leave as it is (the series' buffers hold 0 there)."""
    body = np.full(int(np.prod(shape)), POISON_BITS, np.uint32)
    if init == "causal":
        body.reshape(shape)[..., above_diagonal(shape[-1])] = UNTOUCHED_BITS
    return body


def leave_alone_above_diagonal(expected):
    """A copy of a causal output's expected values with the marker above the diagonal: there
    the result must still hold it, bit for bit (diagnosis.mismatch_mask)."""
    out = np.array(expected, dtype=np.float32)
    out.view(np.uint32)[..., above_diagonal(out.shape[-1])] = UNTOUCHED_BITS
    return out


def guard_report(h, g, n, bits):
    """How many floats of the guard zones around h[g:g+n] changed, and how far out: None when
    none did (or there are no guard zones)."""
    if not g:
        return None
    before = np.flatnonzero(h[:g] != bits)
    after = np.flatnonzero(h[g + n:] != bits)
    if not before.size and not after.size:
        return None
    info = {"before": int(before.size), "after": int(after.size)}
    if before.size:
        info["before_far"] = int(g - before[0])
    if after.size:
        info["after_far"] = int(after[-1] + 1)
    return info


class GuardedBuffers:
    """The device buffers of a job's cases, each inside guard zones, made on first use."""

    def __init__(self, cuda):
        self.cuda = cuda             # pycuda.driver
        self.bufs = {}               # (case index, name) -> (allocation, guard, template, shape)

    def buffer(self, ci, case, name):
        key = (ci, name)
        if key not in self.bufs:
            g = GUARD_FLOATS if case["guard"] else 0
            if name in case["inputs"]:
                a = np.load(case["inputs"][name])
                tmpl = host_template(a.view(np.uint32).reshape(-1), IN_GUARD_BITS, g)
                shape = a.shape
            else:
                spec = case["outputs"][name]
                shape = tuple(spec["shape"])
                tmpl = host_template(output_init(shape, spec["init"]), OUT_GUARD_BITS, g)
            dev = self.cuda.mem_alloc(tmpl.nbytes)
            self.cuda.memcpy_htod(dev, tmpl)
            self.bufs[key] = (dev, g, tmpl, shape)
        return self.bufs[key]

    def args(self, ci, case, names, override=None):
        """A kernel's arguments: scalars as np.int32 / np.float32, buffers as pointers past
        their front guard zone (``override``: name -> pointer, instead of the case's own)."""
        out = []
        for n in names:
            if n in case["scalars"]:
                t, val = case["scalars"][n]
                out.append(np.int32(val) if t == "i" else np.float32(val))
            elif override is not None and n in override:
                out.append(override[n])
            else:
                dev, g, _, _ = self.buffer(ci, case, n)
                out.append(np.intp(int(dev) + 4 * g))
        return out

    def read(self, ci, name):
        """(whole buffer with its guard zones as uint32, guard floats, shape)."""
        dev, g, tmpl, shape = self.bufs[(ci, name)]
        h = np.empty_like(tmpl)
        self.cuda.memcpy_dtoh(h, dev)
        return h, g, shape

    def template(self, ci, name):
        return self.bufs[(ci, name)][2]

    def reset_outputs(self, ci, case):
        """The outputs back to the poison (and their guard zones to theirs)."""
        for name in case["outputs"]:
            dev, _, tmpl, _ = self.buffer(ci, case, name)
            self.cuda.memcpy_htod(dev, tmpl)


SCRAMBLE_SRC = r"""
extern "C" __global__ void attnlab_scramble_shared(float value, int n) {
    extern __shared__ float buf[];
    volatile float* v = buf;             // volatile: the stores must not be optimized away
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        v[i] = value + (float)(i % 97);
    }
}
"""


class Scrambler:
    """Fills every SM's shared memory with a value that differs from run to run.

    A kernel that reads shared memory before it is written (a race) then reads different
    leftovers in each run, and its results differ between runs. Best effort: any failure
    here only makes that detection weaker, and it is not tried again.
    """

    def __init__(self, cuda, kernels):
        self.cuda, self.kernels = cuda, kernels
        self.fn = None
        self.failed = False

    def _prepare(self):
        cuda = self.cuda
        mod = self.kernels.compile_source(SCRAMBLE_SRC, "attnlab_scramble.cu")
        f = mod.get_function("attnlab_scramble_shared")
        dev = cuda.Context.get_device()
        attr = cuda.device_attribute
        nbytes = 48 * 1024
        try:
            optin = dev.get_attribute(attr.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
            f.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, optin)
            nbytes = optin
        except Exception:
            pass
        self.fn, self.nbytes = f, nbytes
        self.blocks = 2 * dev.get_attribute(attr.MULTIPROCESSOR_COUNT)

    def __call__(self, run):
        if self.failed:
            return
        try:
            if self.fn is None:
                self._prepare()
            self.fn(np.float32(1000.0 * (run + 1)), np.int32(self.nbytes // 4),
                    grid=(self.blocks, 1, 1), block=(1024, 1, 1), shared=self.nbytes)
            self.cuda.Context.synchronize()
        except Exception:
            self.failed = True
