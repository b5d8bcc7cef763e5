"""What a cubin says about a kernel's parameters: where the driver copies each one.

A launch through the driver's parameter buffer (attnlab.pdl) must lay the arguments out as ptxas
did. For pointers and ints the C rules (struct's native alignment) agree with it; for a 64-byte
aligned parameter, such as a tensor map passed by value, they need not: ptxas aligns it in the
constant bank, where the parameters of the sm_90a cubins nvcc 13.0 builds start at 0x210, so after
52 bytes of other parameters a map lies at offset 112, not 64 or 128. The layout is read from the cubin's .nv.info.KERNEL section
(ELF), EIATTR_KPARAM_INFO records: (index, offset, size) of each parameter.
"""
import re
import struct

from .errors import InputError, SetupError

KPARAM_INFO, EIATTR_FORMAT_SIZED = 0x17, 4      # the record's attribute, and the format whose value is sized


def parameters(cubin, kernel):
    """[(offset, size)] of ``kernel``'s parameters in ``cubin`` (bytes of an ELF cubin), in order."""
    if not isinstance(cubin, bytes) or cubin[:4] != b"\x7fELF":
        raise InputError(f"cubin must be the bytes of an ELF cubin, got {type(cubin).__name__} {cubin[:8]!r}")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQ", cubin, shoff + n * shentsize) for n in range(shnum)]
    names = sections[shstrndx][4]

    def name(section):
        return cubin[names + section[0]:cubin.index(b"\0", names + section[0])].decode()
    info = [s for s in sections if name(s) == f".nv.info.{kernel}"]
    if not info:
        raise SetupError(f"the cubin has no kernel {kernel!r} (no section .nv.info.{kernel})")
    records, i, found = cubin[info[0][4]:info[0][4] + info[0][5]], 0, {}
    while i < len(records):
        fmt, attribute = records[i], records[i + 1]
        size = struct.unpack_from("<H", records, i + 2)[0] if fmt == EIATTR_FORMAT_SIZED else 0
        if attribute == KPARAM_INFO:
            index, offset, flags = struct.unpack_from("<HHI", records, i + 8)
            found[index] = (offset, (flags >> 18) & 0x3FFF)
        i += 4 + size if fmt == EIATTR_FORMAT_SIZED else 4 if fmt in (2, 3) else 2
    return [found[n] for n in sorted(found)]


def format_layout(arg_format):
    """[(offset, size)] of each argument struct.pack(``arg_format``, ...) packs (pad bytes, "x", are
    not arguments; "128s" is one argument of 128 bytes)."""
    layout, prefix = [], ""
    for count, code in re.findall(r"(\d*)([a-zA-Z?])", arg_format):
        for item in ([count + code] if code in "sp" else [code] * int(count or 1)):
            prefix += item
            if code != "x":
                size = struct.calcsize(item)
                layout.append((struct.calcsize(prefix) - size, size))
    return layout


def check_format(cubin, kernel, arg_format):
    """SetupError unless ``arg_format`` packs ``kernel``'s arguments where ``cubin`` has them."""
    want, packs = parameters(cubin, kernel), format_layout(arg_format)
    if want != packs:
        raise SetupError(f"arg_format {arg_format!r} packs {kernel}'s arguments at (offset, size) {packs}, "
                         f"and its cubin has them at {want}")
