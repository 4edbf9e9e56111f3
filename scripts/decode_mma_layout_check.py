#!/usr/bin/env python3
# Host-side check of kernels/src/decode/decode_mma.cuh's index arithmetic, no GPU:
# emulates one warp over one 16-key chunk (the cp.async copy with its XOR
# swizzle, ldmatrix / ldmatrix.trans row addresses, the m16n8k16 fragments as
# the PTX ISA lays them out, P^T taken from S's C fragments) and checks
# S = Q K^T, O^T = V^T P^T and that each ldmatrix's 8 rows hit 8 different
# 16-byte bank groups, for every built head-dim pair. Plain Python.
# Keep its formulas in step with the kernel's.
import random
random.seed(0)
def randm(r,c): return [[random.gauss(0,1) for _ in range(c)] for _ in range(r)]
def matmul(A,B): return [[sum(A[i][k]*B[k][j] for k in range(len(B))) for j in range(len(B[0]))] for i in range(len(A))]
def T(A): return [list(x) for x in zip(*A)]
# C + A B for m16n8k16 fragments as the PTX ISA lays them out (g = lane / 4, t = lane % 4):
# A pairs (g, 2t) (g + 8, 2t) (g, 2t + 8) (g + 8, 2t + 8); B pairs at k = 2t, 2t + 8 of column g.
def mma(C, A, B):
    Am = [[0.0] * 16 for _ in range(16)]; Bm = [[0.0] * 8 for _ in range(16)]
    for l in range(32):
        g, t = l // 4, l % 4
        for i, (r, c) in enumerate([(g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8)]):
            Am[r][c], Am[r][c + 1] = A[l][i]
        for i, k in enumerate([2 * t, 2 * t + 8]):
            Bm[k][g], Bm[k + 1][g] = B[l][i]
    D = matmul(Am, Bm)
    return [[C[l][0] + D[l // 4][2 * (l % 4)], C[l][1] + D[l // 4][2 * (l % 4) + 1],
             C[l][2] + D[l // 4 + 8][2 * (l % 4)], C[l][3] + D[l // 4 + 8][2 * (l % 4) + 1]] for l in range(32)]

def run(DK,DV):
    KVV,VV=DK//8,DV//8; CH=16
    K=randm(CH,DK); V=randm(CH,DV); Q=randm(8,DK)
    # smem as vectors of 8 elements
    sm=[None]*(CH*KVV+CH*VV)
    for lane in range(32):
        key,half=lane//2,lane%2
        for i in range(KVV//2):
            c=2*i+half; sm[key*KVV+(c^(key%8))]=K[key][c*8:c*8+8]
        for i in range(VV//2):
            c=2*i+half; sm[CH*KVV+key*VV+(c^(key%8))]=V[key][c*8:c*8+8]
    def ldm(addr_of_lane,trans):
        # addr in vectors; returns r[lane][j] = (e0,e1)
        r=[[None]*4 for _ in range(32)]
        for j in range(4):
            rows=[sm[addr_of_lane(8*j+i)] for i in range(8)]
            M=rows
            if trans: M=T(M)
            for l in range(32):
                r[l][j]=(M[l//4][2*(l%4)],M[l//4][2*(l%4)+1])
        return r
    ld_key=lambda l:(l//16)*8+l%8; ld_vec=lambda l:(l//8)%2
    s=[[[0.0]*4 for _ in range(32)] for _ in range(2)]
    for k in range(DK//16):
        b=ldm(lambda l: ld_key(l)*KVV+((2*k+ld_vec(l))^(ld_key(l)%8)),False)
        A=[]
        for l in range(32):
            g,t=l//4,l%4
            lo=(Q[g][16*k+2*t],Q[g][16*k+2*t+1]); hi=(Q[g][16*k+8+2*t],Q[g][16*k+8+2*t+1])
            A.append([lo,(0,0),hi,(0,0)])
        s[0]=mma(s[0],A,[[b[l][0],b[l][1]] for l in range(32)])
        s[1]=mma(s[1],A,[[b[l][2],b[l][3]] for l in range(32)])
    S=matmul(Q,T(K))  # 8x16
    for l in range(32):
        g,t=l//4,l%4
        for n in range(2):
            for e in range(2):
                assert abs(s[n][l][e]-S[g][8*n+2*t+e])<1e-9
            assert s[n][l][2]==0 and s[n][l][3]==0
    P=randm(8,16)
    PB=[[(P[l//4][2*(l%4)],P[l//4][2*(l%4)+1]),(P[l//4][8+2*(l%4)],P[l//4][8+2*(l%4)+1])] for l in range(32)]
    O=matmul(P,V)  # 8 x DV
    for mt in range(DV//16):
        a=ldm(lambda l: CH*KVV+ld_key(l)*VV+((2*mt+ld_vec(l))^(ld_key(l)%8)),True)
        o=mma([[0.0]*4 for _ in range(32)],[a[l] for l in range(32)],PB)
        for l in range(32):
            g,t=l//4,l%4; d=16*mt+g
            assert abs(o[l][0]-O[2*t][d])<1e-9 and abs(o[l][1]-O[2*t+1][d])<1e-9
            assert abs(o[l][2]-O[2*t][d+8])<1e-9 and abs(o[l][3]-O[2*t+1][d+8])<1e-9
    # bank check: for each ldmatrix matrix, 8 rows land in distinct 16B bank groups
    for base,VEC,steps in [(0,KVV,DK//16),(CH*KVV,VV,DV//16)]:
        for k in range(steps):
            for j in range(4):
                groups={ (base+ld_key(8*j+i)*VEC+((2*k+ld_vec(8*j+i))^(ld_key(8*j+i)%8)))%8 for i in range(8)}
                assert len(groups)==8
    print("ok",DK,DV)
for dk,dv in [(64,64),(128,128),(256,256),(192,128)]: run(dk,dv)


# fp8 K/V: byte rows, ldmatrix on b16 pairs of bytes, the permuted k index of
# S's steps, __byte_perm(x, 0, 0x3120) and the m-tile rows 2g / 2g + 1 of O^T.
def run_fp8(DK, DV):
    KVV, VV, CH = DK // 16, DV // 16, 16
    K = randm(CH, DK); V = randm(CH, DV); Q = randm(8, DK)
    sm = [None] * (CH * KVV + CH * VV)  # 16-byte vectors as lists of 16 "bytes"
    for lane in range(32):
        key, half = lane // 2, lane % 2
        for i in range(KVV // 2):
            c = 2 * i + half; sm[key * KVV + (c ^ (key % 8))] = K[key][c * 16:c * 16 + 16]
        for i in range(VV // 2):
            c = 2 * i + half; sm[CH * KVV + key * VV + (c ^ (key % 8))] = V[key][c * 16:c * 16 + 16]
    def ldm(addr_of_lane, trans):  # r[lane][j] = 4 bytes, byte 0 lowest
        r = [[None] * 4 for _ in range(32)]
        for j in range(4):
            rows = [sm[addr_of_lane(8 * j + i)] for i in range(8)]
            for l in range(32):
                g, t = l // 4, l % 4
                if trans:
                    r[l][j] = [rows[2 * t][2 * g], rows[2 * t][2 * g + 1], rows[2 * t + 1][2 * g], rows[2 * t + 1][2 * g + 1]]
                else:
                    r[l][j] = rows[g][4 * t:4 * t + 4]
        return r
    def perm3120(x): return [x[0], x[2], x[1], x[3]]
    ld_key = lambda l: (l // 16) * 8 + l % 8; ld_vec = lambda l: (l // 8) % 2
    s = [[[0.0] * 4 for _ in range(32)] for _ in range(2)]
    for v in range(KVV // 2):
        b = ldm(lambda l: ld_key(l) * KVV + ((2 * v + ld_vec(l)) ^ (ld_key(l) % 8)), False)
        for h in range(2):
            k = 2 * v + h
            A = []
            for l in range(32):
                g, t = l // 4, l % 4
                A.append([(Q[g][16 * k + 4 * t], Q[g][16 * k + 4 * t + 1]), (0, 0),
                          (Q[g][16 * k + 4 * t + 2], Q[g][16 * k + 4 * t + 3]), (0, 0)])
            s[0] = mma(s[0], A, [[tuple(b[l][h][0:2]), tuple(b[l][h][2:4])] for l in range(32)])
            s[1] = mma(s[1], A, [[tuple(b[l][2 + h][0:2]), tuple(b[l][2 + h][2:4])] for l in range(32)])
    S = matmul(Q, T(K))
    for l in range(32):
        g, t = l // 4, l % 4
        for n in range(2):
            for e in range(2):
                assert abs(s[n][l][e] - S[g][8 * n + 2 * t + e]) < 1e-9
    P = randm(8, 16)
    PB = [[(P[l // 4][2 * (l % 4)], P[l // 4][2 * (l % 4) + 1]), (P[l // 4][8 + 2 * (l % 4)], P[l // 4][8 + 2 * (l % 4) + 1])]
          for l in range(32)]
    O = matmul(P, V)
    for v in range(VV // 2):
        a = ldm(lambda l: CH * KVV + ld_key(l) * VV + ((2 * v + ld_vec(l)) ^ (ld_key(l) % 8)), True)
        for h in range(2):
            mt = 2 * v + h
            A = []
            for l in range(32):
                lo, hi = perm3120(a[l][h]), perm3120(a[l][2 + h])
                A.append([tuple(lo[0:2]), tuple(lo[2:4]), tuple(hi[0:2]), tuple(hi[2:4])])
            o = mma([[0.0] * 4 for _ in range(32)], A, PB)
            for l in range(32):
                g, t = l // 4, l % 4
                d_lo, d_hi = 16 * mt + 2 * g, 16 * mt + 2 * g + 1
                assert abs(o[l][0] - O[2 * t][d_lo]) < 1e-9 and abs(o[l][1] - O[2 * t + 1][d_lo]) < 1e-9
                assert abs(o[l][2] - O[2 * t][d_hi]) < 1e-9 and abs(o[l][3] - O[2 * t + 1][d_hi]) < 1e-9
    print("ok fp8", DK, DV)
for dk, dv in [(128, 128), (256, 256)]: run_fp8(dk, dv)


# The copy (attend_range_tc's issue()): for each row layout, copy mapping
# (round 1's lane pair or whole rows), stage size (16 or 32 keys), block
# size and range start, every K and V vector of every key in range lands
# once, at its swizzled place, read from the right page and slot; keys past
# the range are zero-filled writes.
def pow2_part(v): return v & -v
def run_copy(kvv, vv, rows, chunk, block, begin, end, first):
    lpk = min(pow2_part(kvv | vv), 32) if rows else 2
    kpc, groups = 32 // lpk, chunk // (32 // lpk)
    pages = list(range(1000, 1000 + (end + block) // block + 2))
    whole = block % 16 == 0 and begin % 16 == 0
    own = lambda l: (l % chunk) // 16 * 16 if whole else (l // lpk if groups == 1 else l % chunk)
    page_of = lambda l: pages[(first + own(l)) // block] if first + own(l) < end else 0
    own_page = [page_of(l) for l in range(32)]
    seen = {}
    for q in range(groups):
        for l in range(32):
            key = q * kpc + l // lpk
            tok = first + key
            valid = tok < end
            if whole:
                u = (q * kpc) // 16
                t0 = first + 16 * u
                page, slot = own_page[16 * u], t0 % block + key % 16
            else:
                page = own_page[l] if groups == 1 else own_page[key]
                slot = tok % block
            for part, n in (("k", kvv), ("v", vv)):
                for i in range(n // lpk):
                    c = l % lpk + lpk * i
                    dst = (part, key, c ^ (key % 8))
                    assert dst not in seen
                    seen[dst] = (page, slot, c) if valid else None
    for key in range(chunk):
        tok = first + key
        for part, n in (("k", kvv), ("v", vv)):
            for d in range(n):
                got = seen[(part, key, d ^ (key % 8))]
                if tok < end:
                    assert got == (pages[tok // block], tok % block, d), (part, key, d, got)
                else:
                    assert got is None
for kvv, vv in [(8, 8), (16, 16), (32, 32), (24, 16)]:
    for rows in (0, 1):
        for chunk in (16, 32):
            for block in (1, 7, 16, 32, 256):
                for begin in (0, 5, 32):
                    end = begin + 77
                    for first in range(begin, end, chunk):
                        run_copy(kvv, vv, rows, chunk, block, begin, end, first)
print("ok copy mappings")


# PC_DECODE_TC_LEAN_COPY (whole pages, whole-row copies): the same source
# and destination of every vector from per-lane offsets computed once and
# one base per 16-key sub-chunk: src = page * kbv + slot0 * ksv +
# [(key % 16) * ksv + khv + copy_r * rp] + lpk * i * rp, dst = [key * kvv +
# (copy_r ^ key % 8)] + lpk * i (V: + chunk * kvv + key * (vv - kvv)),
# against the formulas of the other path (row_offsets, copy_rows).
def run_lean(kvv, vv, chunk, block, first, rp, ksv, kbv, khv):
    lpk = min(pow2_part(kvv | vv), 32)
    assert lpk % 8 == 0
    kpc, groups = 32 // lpk, chunk // (32 // lpk)
    for q in range(groups):
        for l in range(32):
            copy_key, copy_r = l // lpk, l % lpk
            key = q * kpc + copy_key
            u = (q * kpc) // 16
            t0 = first + 16 * u
            page = 1000 + t0 // block
            slot0 = t0 - (t0 // block) * block
            for part, n in (("k", kvv), ("v", vv)):
                lean_src = (key % 16) * ksv + khv + copy_r * rp
                lean_dst = key * kvv + (copy_r ^ (key % 8))
                if part == "v":
                    lean_dst += chunk * kvv + key * (vv - kvv)
                for i in range(n // lpk):
                    c = copy_r + lpk * i
                    slot = slot0 + key % 16
                    src = page * kbv + (slot * ksv + khv) + c * rp
                    dst = (chunk * kvv if part == "v" else 0) + key * (vv if part == "v" else kvv) + (c ^ (key % 8))
                    assert page * kbv + slot0 * ksv + lean_src + lpk * i * rp == src, (part, q, l, i)
                    assert lean_dst + lpk * i == dst, (part, q, l, i)
for kvv, vv in [(8, 8), (16, 16), (32, 32), (24, 16)]:
    for chunk in (16, 32):
        for block in (16, 32, 48, 256):
            for first in range(0, 512, chunk):
                for rp, ksv, kbv, khv in ((1, 128, 2048, 16), (2, 16, 4096, 512), (1, 16, 4096, 256)):
                    run_lean(kvv, vv, chunk, block, first, rp, ksv, kbv, khv)
print("ok lean copy")
