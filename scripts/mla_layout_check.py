#!/usr/bin/env python3
"""Checks decode_mla_sm90.cu's P exchange on paper: each warpgroup stores its P
fragments with st.shared.b32 at p_offset(row, chunk) + 4 t, and the other
warpgroup's ldmatrix.x4 must return exactly the A fragments (m16n8k16 /
wgmma register-A layout) of those keys, with eight distinct 16-byte bank
groups per 8-lane phase. Mirrors the kernel's p_offset and lane addresses;
run it after changing either. Prints "P exchange layout: ok" or fails."""
def p_offset(row, chunk):
    return row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4)

for wi in range(4):
    mem = {}
    # writer: warp wi, lane -> (g, t); own[kk][q] covers row row_base + 8 (q&1), keys 8(2kk + q/2) + 2t, +1
    for lane in range(32):
        g, t = lane // 4, lane % 4
        row_base = wi * 16 + g
        for kk in range(2):
            for q in range(4):
                row = row_base + 8 * (q & 1)
                key = 8 * (2 * kk + (q >> 1)) + 2 * t
                addr = p_offset(row, 2 * kk + (q >> 1)) + 4 * t
                mem[addr] = (row, key)       # low half: key, high half: key + 1
                mem[addr + 2] = (row, key + 1)
    # reader: ldmatrix.x4: lane l gives the address of row (l % 8) of matrix l / 8;
    # thread T receives, for matrix i, the 32-bit word at row T / 4, column pair T % 4.
    addrs = {}
    for kk in range(2):
        for lane in range(32):
            r = wi * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)
            addrs[lane] = p_offset(r, 2 * kk + (lane >> 4))
        for lane in range(32):
            g, t = lane // 4, lane % 4
            for i in range(4):
                base = addrs[8 * i + g]  # row g of matrix i
                got = (mem[base + 4 * t], mem[base + 4 * t + 2])
                # expected A fragment: a0 (row g, k 2t..), a1 (row g+8, k 2t..), a2 (row g, k 8+2t..), a3 (row g+8, k 8+2t..)
                row = wi * 16 + g + 8 * (i & 1)
                key = 16 * kk + 8 * (i >> 1) + 2 * t
                assert got == ((row, key), (row, key + 1)), (wi, kk, lane, i, got, row, key)
    # bank check for ldmatrix: each 8-address phase hits 8 distinct 16-byte bank groups
    for kk in range(2):
        for i in range(4):
            groups = set()
            for j in range(8):
                lane = 8 * i + j
                r = wi * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)
                a = p_offset(r, 2 * kk + (lane >> 4))
                groups.add((a // 16) % 8)
            assert len(groups) == 8, (wi, kk, i, groups)
print("P exchange layout: ok")
