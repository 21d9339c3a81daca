"""Reads a PNG (8-bit RGB or RGBA, not interlaced) with zlib alone and checks what a chart must
show: its size, that it is not blank, and that given line colours appear in it.
usage: png_check.py FILE WIDTH HEIGHT [RRGGBB ...]"""
import struct
import sys
import zlib


def decode(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, f"{path}: unsupported PNG {header}"
    channels = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - channels] if x >= channels else 0
            b = previous[x]
            c = previous[x - channels] if x >= channels else 0
            if kind == 1:
                line[x] = (line[x] + a) & 255
            elif kind == 2:
                line[x] = (line[x] + b) & 255
            elif kind == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        previous = line
    pixels = [tuple(row[x:x + 3]) for row in rows for x in range(0, stride, channels)]
    return width, height, pixels


path, width, height = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
w, h, pixels = decode(path)
assert (w, h) == (width, height), f"{path}: {w}x{h}, not {width}x{height}"
drawn = sum(1 for p in pixels if p != (255, 255, 255)) / len(pixels)
assert 0.01 < drawn < 0.6, f"{path}: {drawn:.1%} of the pixels are not white"
colours = set(pixels)
for hex_colour in sys.argv[4:]:
    want = tuple(int(hex_colour[i:i + 2], 16) for i in (0, 2, 4))
    assert want in colours, f"{path}: no pixel of colour #{hex_colour}"
print(f"{path}: {w}x{h}, {drawn:.1%} drawn, {len(colours)} colours")
