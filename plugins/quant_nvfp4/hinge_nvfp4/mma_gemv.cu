// NVFP4 W4A16 GEMV on the tensor cores (docs/nvfp4.md, "The tensor-core GEMV"), compiled and
// launched by hinge_nvfp4/mma_gemv.py (kernel = "mma": auto on sm_90 for a bf16 model);
// tools/gpu/nvfp4_mma_probe.py times it. At the end, the weight dequantized from the same repack.
//
//   part[s, m, n] = sum over k of split s of e2m1(code[n, k]) * scale[n, k / 16] * x[m, k]
//
// for M <= 16 rows of x (the MMA's B columns: SETS = 1 set of eight, or 2 whose second MMA of
// each decoded A fragment takes rows 8..15) and N a multiple of 16 (a warp per T = 1 16-row
// tile, or T = 2: the _t2 kernels, whose x fragments feed both tiles' MMAs).
// A superstep is 128 columns of K: eight mma.sync.m16n8k16 (bf16 in, float32 out). The MMA sums
// over its k index in any order, so the repack (mma_layout.repack_codes) chooses which columns of
// W a k index stands for: lane (g, t) = (lane / 4, lane % 4) holds 32 columns of the superstep in
// its eight MMAs, four a MMA, in one of three column maps (mma_layout.REPACK_MAPS):
//   - contiguous (0): MMA u's are 32t + 4u .. + 3, so its x operand is 64 contiguous bytes of row
//     g (four 16-byte loads a superstep, the row's four lanes 64 bytes apart: each load touches
//     four half-used 32-byte sectors of a row), and its A elements of MMAs 0..3 lie in one scale
//     group (2t), of MMAs 4..7 in the next: four scale codes a lane a superstep;
//   - coalesced (1): MMA u = 2v + w's are 32v + 8t + 4w .. + 3, so that each 16-byte load of x
//     is, with the row's three other lanes', 64 contiguous bytes (two whole sectors), and MMAs
//     2v, 2v + 1 lie in group 2v + t / 2: eight scale codes a lane (lanes 2p, 2p + 1 share them:
//     each holds four in its scale word, each reads the pair's two words);
//   - natural (MMA_NATURAL; the wgmma forms of a natural build alone, below): MMA u's k half h
//     is columns 16u + 8h .. + 7, lane t's of them 2t, 2t + 1, so that x is wgmma's B operand as
//     it lies in memory, and MMA u lies in group u: sixteen scale codes a lane (its row's four
//     words, shared by the row's four lanes).
// Either way the scales multiply the A fragments (one bf16x2 multiply a register, exact) and the
// MMAs accumulate the whole K with no float32 rescaling.
// A fragment register (two codes of one row) is a bf16 pattern of e2m1 * 2^-126 (sign at bit 15,
// exponent bits 8..7, mantissa bit 6), cut from the lane's 32-bit word by ``fragments``; its
// multiplier is scale * 2^118 as bf16 (``multiplier``: the repack stores each e4m3 scale as an
// 8-bit exponent-and-mantissa code, mma_layout.encode_scales), so each A element is
// e2m1 * scale * 2^-8, exactly (<= 6 significant bits, >= 2^-18); the sums are times 2^8 at the end.
//
// Layouts (mma_layout.py builds them): codes (N / 16, K / 128, 2, 32, 4) uint32 (word u = 4h + c of
// lane l at [.., h, l, c]: each of a superstep's two 16-byte copies 512 contiguous bytes a warp);
// scales (N / 16, K / 128, 32) uint32 (contiguous: lane (g, t) rows g, g + 8 of group 2t, then of
// 2t + 1; coalesced: lane (g, 2p + h) of group p + 4h, then of p + 4h + 2);
// each (tile, superstep) block of either contiguous, the blocks at strides in 16-byte units the
// launcher reads from the tensors (c_tile / c_super for codes, s_tile / s_super for scales;
// mma_layout.block_strides): tile-major (a tile's supersteps together), superstep-major (the
// warps of a moment on nearby memory) or interleaved (mma_layout.interleave: each block's 128
// bytes of scales right after its 1024 of codes, one stream a tile);
// x (M, K) bf16 rows, 16-byte aligned; part (splits, M, N) float32 sums, or with ``out`` given out
// (M, N) bf16 = sum * row_scale[n] (+ bias[n]), the splits added in the kernel (``Epilogue``).
// K % 128 == 0 and groups_per_split % 8 == 0.
//
// Each warp copies its codes and scales into its own ring of STAGES supersteps in shared memory
// with cp.async (the bulk form: lane 0's cp.async.bulk onto an mbarrier a slot), STAGES - 1
// supersteps ahead of the one it computes (no block barrier), and loads the next superstep's x
// into registers while computing this one. KW warps may share a tile (a run of supersteps each,
// their sums added in shared memory); tools/gpu/nvfp4_mma_probe.py times the forms and tilings,
// docs/nvfp4.md says what the H200 made of them.

#include <cuda_bf16.h>
#include <stdint.h>

#ifndef STAGES
#define STAGES 4  // supersteps in a warp's ring (mma_gemv.build_cubin sets it)
#endif
#ifndef WARPS
#define WARPS 4  // warps a block (mma_gemv.build_cubin sets it: 4, or 8 for the _kw8 kernels)
#endif
#ifndef MMA_PDL
#define MMA_PDL 0  // 1: built for programmatic dependent launch (mma_gemv.build_cubin pdl=True)
#endif
constexpr bool PDL = MMA_PDL;
#ifndef MMA_TRIGGER_START
#define MMA_TRIGGER_START 0  // PDL: 1 lets the kernel after this one launch at this one's start
#endif                       // (mma_gemv.build_cubin trigger="start"), 0 once a warp's weights are read
constexpr bool TRIGGER_START = MMA_TRIGGER_START;
#ifndef MMA_COALESCED
#define MMA_COALESCED 0  // the column map (header): 0 contiguous, 1 coalesced (mma_gemv.build_cubin columns)
#endif
constexpr bool COALESCED = MMA_COALESCED;
#ifndef MMA_NATURAL
#define MMA_NATURAL 0  // 1: the natural column map (mma_gemv.build_cubin columns="natural", with wg=True):
#endif                 // MMA u's k half h = columns 16u + 8h .. + 7 of the superstep, lane t's 2t, 2t + 1
// of them, so that x is copied into wgmma's B stage as it lies in memory (the wgmma forms, below);
// a lane's columns touch all eight scale groups of its rows. The mma.sync kernels cannot read it
// (their x operand would be sixteen 4-byte pieces a lane): a natural build holds the wgmma forms
// and the dequantizing kernels alone
constexpr bool NATURAL = MMA_NATURAL;
constexpr int LANE_GROUPS = NATURAL ? 8 : COALESCED ? 4 : 2;  // scale groups a lane's columns lie in (each of its rows)
#if MMA_NATURAL
typedef uint4 LaneScales;  // a lane's scale words of a block (lane_scales): natural, words 4g .. 4g + 3
#else
typedef uint2 LaneScales;  // its own (contiguous; .y unused) or its pair's two (coalesced)
#endif
constexpr int X_STEP = COALESCED ? 4 : 1;       // 16-byte pieces between a lane's x loads of a superstep

#ifndef MMA_R16_DIAG
#define MMA_R16_DIAG 0  // diagnostic (mma_gemv.build_cubin r16_diag; never cached or launched by the
#endif                  // engine): what the 16-row kernels' second set costs, its sums wrong:
// 1 ("x once") set 1's x is set 0's registers, never loaded (an 8-row kernel's x loads, a 16-row
// kernel's MMAs); 2 ("one set") set 1's MMAs are not issued, its x loaded and added into its sums
// as bits (a 16-row kernel's x loads, an 8-row kernel's MMAs); 0 the GEMV
constexpr int R16_DIAG = MMA_R16_DIAG;

__device__ __forceinline__ int lane_piece(const int t, const int q) {
    // the 16-byte piece (8 columns, 0..15) of a superstep's row that holds lane t's columns of
    // MMAs 2q, 2q + 1: its x load q, and where the dequantizing kernels store them
    return COALESCED ? 4 * q + t : 4 * t + q;
}
#ifndef MMA_TRACE
#define MMA_TRACE 0  // 1: a diagnostic build whose warps record when they pass their marks (Marks)
#endif

// A warp's timeline (mma_gemv.build_cubin trace=True; tools/gpu/nvfp4_trace.py reads it): lane 0
// takes %globaltimer and its multiprocessor's clock at TRACE_MARKS points and appends one record
// to ``mma_trace`` (slot from ``mma_trace_next``): the codes' address (which launch), smid,
// block, warp, then the marks' times, then their clocks. Marks: 0 entry, 1 the prologue's
// copies issued, 2 past griddepcontrol.wait, 3 superstep 0's weights landed, 4 superstep 0
// computed (x had arrived), 5 every superstep computed, 6 done (sums written, or handed to the
// tile's first warp). A mark a warp does not pass stays 0. Without MMA_TRACE every call below
// compiles to nothing.
constexpr int TRACE_MARKS = 7;
#if MMA_TRACE
#define TRACE_RECORDS (1 << 16)
__device__ unsigned long long mma_trace[TRACE_RECORDS][2 + 2 * TRACE_MARKS];
__device__ unsigned int mma_trace_next;
#endif

struct Marks {
#if MMA_TRACE
    unsigned long long at[TRACE_MARKS] = {}, clock[TRACE_MARKS] = {};
#endif
    __device__ __forceinline__ void mark(const int i) {
#if MMA_TRACE
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(at[i])::"memory");
        clock[i] = clock64();
#endif
    }
    __device__ __forceinline__ void record(const void* codes) {
        mark(TRACE_MARKS - 1);
#if MMA_TRACE
        if ((threadIdx.x & 31) != 0) return;
        const unsigned slot = atomicAdd(&mma_trace_next, 1u);
        if (slot >= TRACE_RECORDS) return;
        unsigned smid;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
        unsigned long long* r = mma_trace[slot];
        r[0] = (unsigned long long)codes;
        r[1] = ((unsigned long long)smid << 48) | ((unsigned long long)blockIdx.y << 32) |
               ((unsigned long long)blockIdx.x << 8) | (threadIdx.x >> 5);
#pragma unroll
        for (int i = 0; i < TRACE_MARKS; ++i) r[2 + i] = at[i], r[2 + TRACE_MARKS + i] = clock[i];
#endif
    }
};

#define BLOCKS_PER_SM (24 / WARPS)  // registers for 24 warps a multiprocessor (<= 80 a thread: mma_tiling.resident_warps)
#ifndef MMA_R16_WARPS
#define MMA_R16_WARPS 16  // diagnostic (mma_gemv.build_cubin r16_warps; never cached or launched by the engine)
#endif
#define BLOCKS_PER_SM_16 (MMA_R16_WARPS / WARPS)  // ... 16 warps for the 16-row kernels (<= 128: twice the x registers)
#define BLOCKS_PER_SM_16_T2 (12 / WARPS)  // ... 12 for those of two tiles a warp (<= 168: twice the codes and sums)

__device__ __forceinline__ void fragments(const uint32_t w, uint32_t (&a)[4]) {
    // the repack's bit places (mma_layout.FRAGMENT_BITS): three registers a shift and a mask each,
    // the fourth from three shifts (no four shifted copies of the pattern tile 32 bits)
    const uint32_t pattern = 0x81C081C0u;  // bits 15, 8..6 of each half
    a[0] = w & pattern;
    a[1] = (w << 3) & pattern;
    a[2] = (w << 6) & pattern;
    a[3] = ((w >> 4) & 0x00C000C0u) | ((w >> 5) & 0x01000100u) | ((w << 1) & 0x80008000u);
}

__device__ __forceinline__ uint32_t multiplier(const uint32_t codes4, const int byte) {
    // scale code ``byte`` of the word -> bf16x2 (scale * 2^118) twice: the code's 8 bits at bits
    // 11..4 of each half under exponent bits 111 (mma_layout.encode_scales)
    const uint32_t both = __byte_perm(codes4, 0u, 0x4040u + 0x0101u * byte);
    return both * 16u + 0x70007000u;  // code bits 4..11, exponent bits 12..14: + is |, one LEA
}

__device__ __forceinline__ uint32_t mul_bf16x2(const uint32_t a, const uint32_t b) {
    uint32_t d;
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t b0,
                                    const uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t x_word(const uint4 (&xv)[4], const int i) {
    // 32-bit word i (0..15) of a lane's 64 bytes of x: MMA u's B registers are words 2u, 2u + 1
    const uint4 v = xv[i >> 2];
    return (i & 3) == 0 ? v.x : (i & 3) == 1 ? v.y : (i & 3) == 2 ? v.z : v.w;
}

__device__ __forceinline__ void lane_multipliers(const LaneScales scales, uint32_t (&row_g)[LANE_GROUPS],
                                                 uint32_t (&row_g8)[LANE_GROUPS]) {
    // the multipliers of a lane's groups (rows g, g + 8): group v's codes are bytes 2 (v % 2),
    // 2 (v % 2) + 1 of word v / 2 (scales.y: the pair's second word, coalesced only); natural:
    // byte v % 4 of word v / 4 (row g: .x, .y) and of word 2 + v / 4 (row g + 8: .z, .w)
#if MMA_NATURAL
#pragma unroll
    for (int v = 0; v < LANE_GROUPS; ++v) {
        row_g[v] = multiplier(v < 4 ? scales.x : scales.y, v & 3);
        row_g8[v] = multiplier(v < 4 ? scales.z : scales.w, v & 3);
    }
#else
#pragma unroll
    for (int v = 0; v < LANE_GROUPS; ++v) row_g[v] = multiplier((v >> 1) ? scales.y : scales.x, 2 * (v & 1));
#pragma unroll
    for (int v = 0; v < LANE_GROUPS; ++v) row_g8[v] = multiplier((v >> 1) ? scales.y : scales.x, 2 * (v & 1) + 1);
#endif
}

__device__ __forceinline__ int mma_group(const int u) {
    // which of the lane's groups MMA u's columns lie in
    return NATURAL ? u : COALESCED ? u >> 1 : u >> 2;
}

__device__ __forceinline__ void scaled_fragment(const uint32_t word, const int u,
                                                const uint32_t (&row_g)[LANE_GROUPS],
                                                const uint32_t (&row_g8)[LANE_GROUPS], uint32_t (&a)[4]) {
    // MMA u's A fragment from the lane's code word u, times its groups' multipliers (rows g, g + 8)
    fragments(word, a);
    const int group = mma_group(u);
    a[0] = mul_bf16x2(a[0], row_g[group]);
    a[1] = mul_bf16x2(a[1], row_g8[group]);
    a[2] = mul_bf16x2(a[2], row_g[group]);
    a[3] = mul_bf16x2(a[3], row_g8[group]);
}

template <int SETS>
__device__ __forceinline__ void superstep(const uint4 c0, const uint4 c1, const LaneScales scales,
                                          const uint4 (&xv)[SETS][4], float (&sums)[2][SETS][4]) {
    // eight decoded A fragments, each into SETS MMAs (set s: x rows 8s .. 8s + 7); one set's
    // even and odd MMAs into two accumulators (sums[0], sums[1]: two dependency chains, not
    // one), two sets' into their own (sums[0][s]: the sets are the two chains)
    const uint32_t words[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
    uint32_t row_g[LANE_GROUPS], row_g8[LANE_GROUPS];
    lane_multipliers(scales, row_g, row_g8);
#pragma unroll
    for (int u = 0; u < 8; ++u) {
        uint32_t a[4];
        scaled_fragment(words[u], u, row_g, row_g8, a);
#pragma unroll
        for (int set = 0; set < SETS; ++set) {
            if (R16_DIAG == 2 && set > 0)  // (the diagnostic: x's words kept, no MMA)
                sums[0][set][u & 3] += __uint_as_float((x_word(xv[set], 2 * u) ^ x_word(xv[set], 2 * u + 1)) & 0x7fffffu);
            else
                mma(sums[SETS == 1 ? (u & 1) : 0][set], a, x_word(xv[set], 2 * u), x_word(xv[set], 2 * u + 1));
        }
    }
}

// each warp's ring of STAGES supersteps of codes of its T tiles (accumulate), one array a T
// shared by the kernel's functions, so that the warps of a tile (gemv, KW > 1) add their sums
// and a gated epilogue hands a tile's values to its pair's warp through the rings their main
// loops are done with (finish): no shared memory beyond the rings (at most T x 4 x SETS x 32
// floats a warp, T KiB: STAGES >= 2 give 2 T)
template <int T>
__device__ __forceinline__ uint4 (*codes_ring(const int warp))[T][2][32] {
    __shared__ __align__(128) uint4 ring[WARPS][STAGES][T][2][32];
    return ring[warp];
}

struct Epilogue {
    // out == nullptr: float32 sums into part[split, m, n] (the caller adds the splits and scales);
    // else out[m, n] = bf16(sum * row_scale[n] + bias[n]) (bias may be nullptr), written by the
    // one split, or with several by the last warp of a tile to finish: each split's warp stores
    // its sums into part and counts itself in counters[tile]; the last one adds the splits in
    // order 0, 1, ... (the same bits whichever finishes last) and sets the count back to 0.
    //
    // pair_tiles > 0: the weight's rows are a fused [gate | up] of pair_tiles tiles each, stored
    // pairwise (mma_layout.pair_rows: tile 2j is gate tile j, tile 2j + 1 up tile j); row_scale
    // is in that order. Not gated, out (M, N) gets each row back in its [gate | up] place. Gated,
    // out (M, N / 2) = silu(gate) * up of the two bf16 results, as hinge's silu_mul computes it
    // (silu_mul below): the pair's two tiles meet in shared memory when one block holds both
    // (one split, two or four tiles a block), else through part[0] (their bf16 values) and
    // counters[N / 16 + j], the second to finish writing the pair's outputs
    float* part;
    const float* row_scale;
    const uint16_t* bias;
    uint16_t* out;
    int* counters;
    int pair_tiles;
    int gated;
};

__device__ __forceinline__ float rounded(const float sum, const float row_scale, const uint16_t* bias,
                                         const int row) {
    // bf16(sum * row_scale (+ bias)) as a float: one rounded multiply (or fused multiply-add)
    const float y = bias != nullptr
        ? __fmaf_rn(sum, row_scale, __bfloat162float(__ushort_as_bfloat16(bias[row])))
        : __fmul_rn(sum, row_scale);
    return __bfloat162float(__float2bfloat16_rn(y));
}

__device__ __forceinline__ float silu_mul(const float gate, const float up) {
    // gate / (1 + exp(-gate)) * up in float32, the instructions Triton emits for
    // hinge.layers.fast_triton.silu_mul (0 - g, times log2 e, ex2.approx, + 1, div.full, times
    // up), so that a gated GEMV gives that kernel's bits
    float t, e, d, q, y;
    asm("sub.f32 %0, 0f00000000, %1;" : "=f"(t) : "f"(gate));
    asm("mul.f32 %0, %1, 0f3FB8AA3B;" : "=f"(t) : "f"(t));
    asm("ex2.approx.f32 %0, %1;" : "=f"(e) : "f"(t));
    asm("add.f32 %0, %1, 0f3F800000;" : "=f"(d) : "f"(e));
    asm("div.full.f32 %0, %1, %2;" : "=f"(q) : "f"(gate), "f"(d));
    asm("mul.f32 %0, %1, %2;" : "=f"(y) : "f"(q), "f"(up));
    return y;
}

__device__ __forceinline__ int paired_row(const int pair_tiles, const int row) {
    // a kernel row's place in W: itself, or (pair_tiles) its [gate | up] row
    if (pair_tiles == 0) return row;
    const int tile = row >> 4;
    return (tile & 1) * pair_tiles * 16 + (tile >> 1) * 16 + (row & 15);
}

__device__ __forceinline__ int value_row(const int tile, const int lane, const int i) {
    // the W row of a lane's accumulator value i of ``tile`` (finish's order, below)
    return tile * 16 + (lane >> 2) + 8 * ((i >> 1) & 1);
}

__device__ __forceinline__ int value_col(const int lane, const int i) {
    // the x row of a lane's accumulator value i
    return 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
}

__device__ __forceinline__ void store_gated(const Epilogue& e, const int half, const int pair, const int col,
                                            const int row, const float gate, const float up) {
    // a gated output: silu(gate) * up of pair ``pair``'s row ``row`` (either tile's) for x row col
    e.out[(size_t)col * half + pair * 16 + (row & 15)] = __bfloat16_as_ushort(__float2bfloat16_rn(silu_mul(gate, up)));
}

#ifndef MMA_ROW_SCALE
#define MMA_ROW_SCALE 0  // when the epilogue's row_scale is read (mma_gemv.ROW_SCALE_READS): 0 in the
#endif                   // epilogue, 1 at the start (before griddepcontrol.wait), 2 just after the wait
constexpr int ROW_SCALE = MMA_ROW_SCALE;
constexpr bool EARLY_SCALES = ROW_SCALE != 0;  // read before the epilogue, held in registers

template <int T>
__device__ __forceinline__ void early_scales(const float* row_scale, const int n, const int tile, const int lane,
                                             float (&scale)[T][2]) {
    // EARLY_SCALES (mma_gemv.build_cubin row_scale "start" or "wait"): the row_scale of a lane's
    // two W rows of each tile (g and g + 8: value_row's i / 2 % 2), read before the main loop
    // rather than in the epilogue, where the load is the last round trip of the call (the
    // layer's weight, which no kernel before writes, so "start" reads it before
    // griddepcontrol.wait; through L2, as lane_scales_l2, so that ptxas keeps it there; "wait"
    // right after the wait and x's first loads, so that nothing more is in flight before it)
#pragma unroll
    for (int j = 0; j < T; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
            scale[j][h] = tile + j < (n >> 4) ? __ldcg(row_scale + value_row(tile + j, lane, 2 * h)) : 0.f;
}

__device__ __forceinline__ float* ring_floats(float* rings, const int warp) {
    // a warp's ring of codes as floats, which its main loop is done with: the static rings
    // (codes_ring), or ``rings``, the first of a block's rings of STAGES KiB in dynamic shared
    // memory (the natural build's wgmma forms: WgRings; that build has no static rings)
#if MMA_NATURAL
    return rings + warp * STAGES * 256;
#else
    return rings != nullptr ? rings + warp * STAGES * 256 : reinterpret_cast<float*>(codes_ring<1>(warp));
#endif
}

template <int SETS, int T>
__device__ __forceinline__ void finish(const Epilogue& e, const int m, const int n, const int tile,
                                       const int lane, const int kw, float (&acc)[4 * SETS],
                                       const float (&scale)[2], float* rings = nullptr) {
    // lane (g, t) holds of set s's D (row g, columns 2t, 2t + 1) and (row g + 8, ...): W rows,
    // x rows 8s + 2t, 8s + 2t + 1 (value i: set i / 4, row g + 8 (i / 2 % 2), column i % 2);
    // a gated pair's values meet in the warps' rings (ring_floats: ``rings`` or the static ones)
    constexpr int V = 4 * SETS;
    const bool direct = e.out != nullptr && gridDim.y == 1;
    int rows[V], cols[V];
#pragma unroll
    for (int i = 0; i < V; ++i) rows[i] = value_row(tile, lane, i), cols[i] = value_col(lane, i);
    if (!direct) {
#pragma unroll
        for (int i = 0; i < V; ++i)
            if (cols[i] < m) e.part[((size_t)blockIdx.y * m + cols[i]) * n + rows[i]] = acc[i];
        if (e.out == nullptr) return;
        __threadfence();  // this lane's sums are visible before the warp counts itself
        __syncwarp();
        int last = 0;
        if (lane == 0) last = atomicAdd(&e.counters[tile], 1) == (int)gridDim.y - 1;
        if (!__shfl_sync(0xFFFFFFFFu, last, 0)) return;
        __threadfence();
#pragma unroll
        for (int i = 0; i < V; ++i) {
            acc[i] = 0.f;
            if (cols[i] < m)
                for (int s = 0; s < (int)gridDim.y; ++s)  // L2 reads: other SMs wrote them
                    acc[i] += __ldcg(&e.part[((size_t)s * m + cols[i]) * n + rows[i]]);
        }
        if (lane == 0) e.counters[tile] = 0;  // ready for the next launch
    }
    float y[V];
#pragma unroll
    for (int i = 0; i < V; ++i)
        y[i] = cols[i] < m ? rounded(acc[i], EARLY_SCALES ? scale[(i >> 1) & 1] : e.row_scale[rows[i]], e.bias, rows[i]) : 0.f;
    if (!e.gated) {
#pragma unroll
        for (int i = 0; i < V; ++i)
            if (cols[i] < m)
                e.out[(size_t)cols[i] * n + paired_row(e.pair_tiles, rows[i])] =
                    __bfloat16_as_ushort(__float2bfloat16_rn(y[i]));
        return;
    }
    const int pair = tile >> 1, half = n >> 1;
    if (T == 1 && direct && (WARPS / kw) % 2 == 0) {
        // gated, one split, the pair's two tiles in this block (tiles 2j, 2j + 1 are its warps'
        // local tiles 2i, 2i + 1): the gate tile's warp hands its values over in its own ring
        // (its copies are all consumed: the main loop is over) and goes, the up tile's warp
        // waits for them (named barrier past the tiles', 64 threads) and writes the outputs. The global exchange below costs two fences and an atomic's
        // round trip at the tail of every warp (end to end on the H200, Qwen3-8B batch 1: 359.6
        // tokens/s with it, 364.7 with this; docs/nvfp4.md, twelfth session)
        const int warp = threadIdx.x >> 5, slot = (tile % (WARPS / kw)) >> 1, id = 1 + WARPS / kw + slot;
        if ((tile & 1) == 0) {
            float* mine = ring_floats(rings, warp);
            __syncwarp();  // every lane's reads of the ring are done (lane l writes others' codes)
#pragma unroll
            for (int i = 0; i < V; ++i) mine[i * 32 + lane] = y[i];
            asm volatile("bar.arrive %0, 64;" ::"r"(id) : "memory");
            return;
        }
        asm volatile("bar.sync %0, 64;" ::"r"(id) : "memory");
        const float* gates = ring_floats(rings, warp - kw);
#pragma unroll
        for (int i = 0; i < V; ++i)
            if (cols[i] < m) store_gated(e, half, pair, cols[i], rows[i], gates[i * 32 + lane], y[i]);
        return;
    }
    // gated otherwise (splits, or a tile a block): this tile's bf16 values into part[0] (the
    // last split read its own sums of this tile before), then the pair's second tile to arrive
    // writes silu(gate) * up
#pragma unroll
    for (int i = 0; i < V; ++i)
        if (cols[i] < m) e.part[(size_t)cols[i] * n + rows[i]] = y[i];
    __threadfence();
    __syncwarp();
    const int other = (tile ^ 1) * 16 - tile * 16;  // the partner's rows: + other
    int second = 0;
    if (lane == 0) second = atomicAdd(&e.counters[(n >> 4) + pair], 1) == 1;
    if (!__shfl_sync(0xFFFFFFFFu, second, 0)) return;
    __threadfence();
#pragma unroll
    for (int i = 0; i < V; ++i) {
        if (cols[i] >= m) continue;
        const float theirs = __ldcg(&e.part[(size_t)cols[i] * n + rows[i] + other]);
        store_gated(e, half, pair, cols[i], rows[i], (tile & 1) ? theirs : y[i], (tile & 1) ? y[i] : theirs);
    }
    if (lane == 0) e.counters[(n >> 4) + pair] = 0;  // ready for the next launch
}

template <int SETS>
__device__ __forceinline__ void finish_pair(const Epilogue& e, const int m, const int n, const int tile,
                                            const int lane, float (&acc)[2][4 * SETS], const float (&scale)[2][2]) {
    // gated, one split, a warp of two tiles: a pair's gate tile ``tile`` (even) and its up tile
    // tile + 1 in registers, silu(gate) * up of their bf16 values written as finish's exchanges do
#pragma unroll
    for (int i = 0; i < 4 * SETS; ++i) {
        const int row = value_row(tile, lane, i), col = value_col(lane, i);
        if (col >= m) continue;
        const int h = (i >> 1) & 1;
        store_gated(e, n >> 1, tile >> 1, col, row,
                    rounded(acc[0][i], EARLY_SCALES ? scale[0][h] : e.row_scale[row], nullptr, row),
                    rounded(acc[1][i], EARLY_SCALES ? scale[1][h] : e.row_scale[row + 16], nullptr, row + 16));
    }
}

#ifndef L2_PREFETCH
#define L2_PREFETCH 0  // bytes L2 is asked to fetch around each copy: 0 (no hint), 64, 128 or 256
#endif
#ifndef MMA_L2_RUN
#define MMA_L2_RUN 0  // PDL: 1 asks L2 for a warp's whole run before griddepcontrol.wait (mma_gemv PREFETCHES "run")
#endif
constexpr bool L2_RUN = MMA_L2_RUN;
#ifndef MMA_WAIT_FIRST
#define MMA_WAIT_FIRST 0  // PDL, diagnostic: 1 waits (griddepcontrol.wait) before the prologue's copies
#endif
constexpr bool WAIT_FIRST = MMA_WAIT_FIRST;
#ifndef MMA_NO_WAIT
#define MMA_NO_WAIT 0  // PDL, diagnostic: 1 never waits (no griddepcontrol.wait: x read while the kernel
#endif                 // before may still write it): what the wait costs back to back, its sums undefined
#ifndef MMA_X_ONCE
#define MMA_X_ONCE 0  // diagnostic: 1 loads x for a warp's first superstep only and computes every one
#endif                // with it (the forms that load x into registers; xring's ring unchanged): what
constexpr bool X_ONCE = MMA_X_ONCE;  // x's loads a superstep cost, its sums wrong
#ifndef MMA_X_SAME
#define MMA_X_SAME 0  // diagnostic: 1 loads x every superstep as the GEMV does, but always the first
#endif                // superstep's pieces (L1 hits past the first: x's L2 traffic gone, its L1 work kept)
constexpr bool X_SAME = MMA_X_SAME;
#if L2_PREFETCH == 256
#define COPY_ASYNC "cp.async.cg.shared.global.L2::256B [%0], [%1], 16;"
#elif L2_PREFETCH == 128
#define COPY_ASYNC "cp.async.cg.shared.global.L2::128B [%0], [%1], 16;"
#elif L2_PREFETCH == 64
#define COPY_ASYNC "cp.async.cg.shared.global.L2::64B [%0], [%1], 16;"
#elif L2_PREFETCH == 0
#define COPY_ASYNC "cp.async.cg.shared.global [%0], [%1], 16;"
#else
#error "L2_PREFETCH is 0, 64, 128 or 256"
#endif

__device__ __forceinline__ void prefetch_l2(const void* src, const unsigned bytes) {
    // ``bytes`` (a multiple of 16) from global memory into L2, nothing waited for (sm_90)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
#endif
}

template <int T>
__device__ __forceinline__ void prefetch_run(const uint4* const (&c_block)[T], const uint4* const (&s_block)[T],
                                             const int c_step, const int s_step, const int from,
                                             const int steps, const int lane) {
    // L2_RUN: the run's supersteps from ``from`` on, a lane a superstep (each tile's 1024 bytes
    // of codes and 128 of scales), asked of L2 while the kernel before still runs: what the ring
    // copies after the wait then comes from L2 (tools/gpu/read_ceiling.py's PDL read asks for all
    // its bytes before its wait)
    for (int s = from + lane; s < steps; s += 32) {
#pragma unroll
        for (int j = 0; j < T; ++j) {
            prefetch_l2(c_block[j] + (size_t)s * c_step, 64 * 16);
            prefetch_l2(s_block[j] + (size_t)s * s_step, 8 * 16);
        }
    }
}

__device__ __forceinline__ void copy_async(void* dst, const void* src) {
    // 16 bytes, through L2 only (.cg): the weights stream past L1, which keeps x
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile(COPY_ASYNC ::"r"(s), "l"(src) : "memory");
}

__device__ __forceinline__ void copy_superstep(uint4 (&codes)[2][32], uint32_t (&scales)[32],
                                               const uint4* c_src, const uint4* s_src,
                                               const int lane) {
    // a superstep's two 512-byte halves of codes, and its 128 bytes of scale words by lanes 0..7
    copy_async(&codes[0][lane], c_src);
    copy_async(&codes[1][lane], c_src + 32);
    if (lane < 8) copy_async(reinterpret_cast<uint4*>(scales) + lane, s_src);
}

template <int T>
__device__ __forceinline__ void copy_supersteps(uint4 (&codes)[T][2][32], uint32_t (&scales)[T][32],
                                                const uint4* const (&c_src)[T],
                                                const uint4* const (&s_src)[T], const int at_c,
                                                const int at_s, const int lane) {
    // copy_superstep for each of a warp's T tiles
#pragma unroll
    for (int j = 0; j < T; ++j) copy_superstep(codes[j], scales[j], c_src[j] + at_c, s_src[j] + at_s, lane);
}

__device__ __forceinline__ LaneScales lane_scales(const uint32_t* words, const int lane) {
    // a lane's scale words of a (tile, superstep) block's 32: its own (contiguous; .y unused), or
    // its pair's two (coalesced: one 8-byte load), or its row's four (natural: one 16-byte load)
#if MMA_NATURAL
    return reinterpret_cast<const uint4*>(words)[lane >> 2];
#else
    return COALESCED ? reinterpret_cast<const uint2*>(words)[lane >> 1] : make_uint2(words[lane], 0u);
#endif
}

__device__ __forceinline__ LaneScales lane_scales_l2(const uint32_t* words, const int lane) {
    // lane_scales from global memory through L2 (ld.global.cg, as the codes: a read-only
    // non-coherent load may be scheduled past griddepcontrol.wait, ptxas put the REGS form's there)
#if MMA_NATURAL
    return __ldcg(reinterpret_cast<const uint4*>(words) + (lane >> 2));
#else
    return COALESCED ? __ldcg(reinterpret_cast<const uint2*>(words) + (lane >> 1)) : make_uint2(__ldcg(words + lane), 0u);
#endif
}

template <int T>
__device__ __forceinline__ void read_slot(const uint4 (&codes)[T][2][32], const uint32_t (&scales)[T][32],
                                          const int lane, uint4 (&c0)[T], uint4 (&c1)[T], LaneScales (&sc)[T]) {
    // a lane's codes and scale words of a ring slot, each of T tiles
#pragma unroll
    for (int j = 0; j < T; ++j) c0[j] = codes[j][0][lane], c1[j] = codes[j][1][lane], sc[j] = lane_scales(scales[j], lane);
}

__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int PENDING>
__device__ __forceinline__ void wait_copies() {
    asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory");
}

__device__ __forceinline__ void copy_x(uint4* dst, const uint4* src) {
    // a lane's 64 bytes of its x row for a superstep (its four pieces, X_STEP apart)
#pragma unroll
    for (int j = 0; j < 4; ++j) copy_async(dst + j * X_STEP, src + j * X_STEP);
}

template <int SETS>
__device__ __forceinline__ void copy_x_rows(uint4* slot, const uint4* const (&src)[SETS], const size_t at,
                                            const int g, const int m) {
    // the xring form: a lane's 64 bytes of each of its rows 8s + g < m into a ring slot of m rows
#pragma unroll
    for (int set = 0; set < SETS; ++set)
        if (8 * set + g < m) copy_x(slot + (8 * set + g) * 16, src[set] + at);
}

// the bulk form's ring: one mbarrier a slot, lane 0 the producer (Hopper's bulk copies through
// the async proxy, completing on the slot's barrier by bytes)
__device__ __forceinline__ unsigned shared_address(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void barrier_init(uint64_t* bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(bar)) : "memory");
}

__device__ __forceinline__ void barrier_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

template <int T>
__device__ __forceinline__ void bulk_superstep(uint4 (&codes)[T][2][32], uint32_t (&scales)[T][32],
                                               const uint4* const (&c_block)[T],
                                               const uint4* const (&s_block)[T], const int at_c,
                                               const int at_s, uint64_t* bar) {
    // a superstep's 1024 bytes of codes and 128 of scales of each of T tiles (their blocks at
    // c_block[j] + at_c, s_block[j] + at_s), two bulk copies a tile onto ``bar``
    const unsigned b = shared_address(bar);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "n"(1152 * T) : "memory");
#pragma unroll
    for (int j = 0; j < T; ++j) {
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 1024, [%2];"
            ::"r"(shared_address(codes[j])), "l"(c_block[j] + at_c), "r"(b) : "memory");
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 128, [%2];"
            ::"r"(shared_address(scales[j])), "l"(s_block[j] + at_s), "r"(b) : "memory");
    }
}

template <int T>
__device__ __forceinline__ void bulk_prologue(uint4 (*codes)[T][2][32], uint32_t (*scales)[T][32],
                                              const uint4* const (&c_block)[T], const uint4* const (&s_block)[T],
                                              const int c_step, const int s_step, const int steps, uint64_t* bars,
                                              const int lane) {
    // the bulk ring's start: lane 0 sets up its STAGES barriers and copies supersteps 0 ..
    // STAGES - 2 (those there are), the warp past it together
    if (lane == 0) {
#pragma unroll
        for (int s = 0; s < STAGES; ++s) barrier_init(&bars[s]);
        barrier_init_fence();
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s)
            if (s < steps) bulk_superstep<T>(codes[s], scales[s], c_block, s_block, s * c_step, s * s_step, &bars[s]);
    }
    __syncwarp();
}

__device__ __forceinline__ void barrier_wait(uint64_t* bar, const unsigned parity) {
    asm volatile(
        "{\n .reg .pred done;\n WAIT:\n"
        " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        " @!done bra WAIT;\n}" ::"r"(shared_address(bar)), "r"(parity) : "memory");
}

__device__ __forceinline__ void wait_for_prerequisites() {
    // programmatic dependent launch (mma_gemv.MmaGemv pdl=True, hinge.devices.early_dependents):
    // the kernel may have started while the one before it runs; it reads x (that kernel's output)
    // and writes anything only after this. Without the launch attribute it returns at once. x is
    // read through coherent loads then (load_x): ptxas moved read-only ones above the wait.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !MMA_NO_WAIT
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ uint4 x_piece(const uint4* at) {
    // one 16-byte piece of x. PDL: x is no read-only data: the kernel before may still be
    // writing it when this one starts, and read-only (non-coherent) loads may be scheduled above
    // the wait
    return PDL ? __ldca(at) : __ldg(at);
}

__device__ __forceinline__ void load_x(uint4 (&xv)[4], const uint4* row) {
#pragma unroll
    for (int i = 0; i < 4; ++i) xv[i] = x_piece(row + i * X_STEP);
}

#define GEMV_PARAMS                                                                              \
    const uint4 *__restrict__ codes, const uint32_t *__restrict__ scales,                        \
        const uint16_t *__restrict__ x, float *__restrict__ part, int n, int k, int m,           \
        int c_tile, int c_super, int s_tile, int s_super, int groups_per_split,                 \
        const float *__restrict__ row_scale, const uint16_t *__restrict__ bias,                  \
        uint16_t *__restrict__ out, int *__restrict__ counters, int pair_tiles, int gated

template <int SETS>
__device__ __forceinline__ void x_sources(const uint16_t* __restrict__ x, const int k, const int m,
                                          const int first, const int g, const int t, int (&x_row)[SETS],
                                          const uint4* (&x_src)[SETS]) {
    // each set's x row of lane (g, t) and its first 16-byte piece of superstep ``first``: lanes
    // of columns g >= m load row m - 1 (a B column no output reads: D's columns are
    // independent), so that every lane loads unconditionally; set s: row 8s + g
#pragma unroll
    for (int set = 0; set < SETS; ++set) {
        x_row[set] = min(8 * set + g, m - 1);
        x_src[set] = reinterpret_cast<const uint4*>(x + (size_t)x_row[set] * k) + (size_t)first * 16 + lane_piece(t, 0);
    }
}

template <int SETS>
__device__ __forceinline__ void load_sets_x(uint4 (&xv)[SETS][4], const uint4* const (&x_src)[SETS],
                                            const size_t piece) {
    // each set's x from its source's 16-byte piece ``piece`` on (R16_DIAG 1: set 0's registers
    // again past set 0)
#pragma unroll
    for (int set = 0; set < SETS; ++set) {
        if (R16_DIAG == 1 && set > 0) {
#pragma unroll
            for (int j = 0; j < 4; ++j) xv[set][j] = xv[0][j];
        } else {
            load_x(xv[set], x_src[set] + piece);
        }
    }
}

template <int SETS>
__device__ __forceinline__ void load_next_x(uint4 (&xn)[SETS][4], const uint4* const (&x_src)[SETS], const int i,
                                            const int steps) {
    // each set's x of superstep i + 1, loaded while superstep i computes (the last one again
    // past the last: in bounds)
    load_sets_x<SETS>(xn, x_src, (size_t)min(i + 1, steps - 1) * 16);
}

__device__ __forceinline__ uint32_t xor_of(const uint4 c0, const uint4 c1, const LaneScales sc) {
    // a superstep's code and scale words folded: the memory-side diagnostics' stand-in for the math
    return c0.x ^ c0.y ^ c0.z ^ c0.w ^ c1.x ^ c1.y ^ c1.z ^ c1.w ^ sc.x ^ sc.y;
}

__device__ __forceinline__ void fold_x(uint32_t& fold, const uint4 (&xv)[4]) {
    // a lane's 64 bytes of x folded into ``fold`` (likewise)
#pragma unroll
    for (int j = 0; j < 4; ++j) fold ^= xv[j].x ^ xv[j].y ^ xv[j].z ^ xv[j].w;
}

template <int SETS>
__device__ __forceinline__ void take_next_x(uint4 (&xv)[SETS][4], const uint4 (&xn)[SETS][4]) {
    // the next superstep's x, loaded while this one computed, becomes this one's
#pragma unroll
    for (int set = 0; set < SETS; ++set)
#pragma unroll
        for (int j = 0; j < 4; ++j) xv[set][j] = xn[set][j];
}

template <int SETS>
__device__ __forceinline__ void scaled_sums(const float (&sums)[2][SETS][4], float (&acc)[4 * SETS]) {
    // a tile's two accumulators added, in finish's order (set s's four values at 4s .. 4s + 3)
#pragma unroll
    for (int i = 0; i < 4 * SETS; ++i)  // A was e2m1 * scale * 2^-8
        acc[i] = (sums[0][i >> 2][i & 3] + sums[1][i >> 2][i & 3]) * 256.f;
}

enum Form { PLAIN, AHEAD, RING, MATH, XRING, BULK, REGS, REGS_FOLD };

__device__ __forceinline__ void tile_barrier(const int id, const int threads) {
    // the warps of one tile alone (named barrier ``id``; 0 is __syncthreads'): a block's tiles
    // past N have returned
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

template <int FORM, int SETS, int T>
__device__ __forceinline__ void accumulate(const uint4* __restrict__ codes,
                                           const uint32_t* __restrict__ scales,
                                           const uint16_t* __restrict__ x, const int k, const int m,
                                           const int c_tile, const int c_super,
                                           const int s_tile, const int s_super,
                                           const int tile, const int last_tile, const int first,
                                           const int steps, const int warp, const int lane,
                                           float (&acc)[T][4 * SETS], Marks& marks,
                                           const float* row_scale, float (&scale)[T][2]) {
    // a warp's sums over supersteps first .. first + steps - 1 (steps >= 1) of its T tiles
    // tile .. tile + T - 1 (one past last_tile reads last_tile's weights again; the caller
    // drops its sums): acc[j] (set s's four values at 4s .. 4s + 3: finish's order); row_scale
    // given (ROW_SCALE 2, the tile's finishing warp): its rows' into scale once x is asked for
    constexpr bool ahead = FORM == AHEAD, streams = FORM != MATH, x_ring = FORM == XRING;
    constexpr bool bulk = FORM == BULK;
    extern __shared__ uint4 x_slots[];
    __shared__ __align__(128) uint32_t ring_scales[WARPS][STAGES][T][32];
    __shared__ uint64_t ring_bars[bulk ? WARPS : 1][STAGES];  // BULK: a barrier a slot
    const int g = lane >> 2, t = lane & 3;
    // (tile, superstep) blocks of 64 uint4 codes and 8 uint4 of scale words, at the strides the
    // launcher passes (in uint4s): tile-major, superstep-major or interleaved (mma_gemv.MmaGemv)
    // (int offsets: a weight of 2^31 uint4, 32 GiB, is past any layer's)
    const uint4 *c_block[T], *s_block[T], *c_src[T], *s_src[T];
#pragma unroll
    for (int j = 0; j < T; ++j) {
        const int at = T == 1 ? tile : min(tile + j, last_tile);
        c_block[j] = codes + at * c_tile + first * c_super;  // the warp's first blocks
        s_block[j] = reinterpret_cast<const uint4*>(scales) + at * s_tile + first * s_super;
        c_src[j] = c_block[j] + lane;  // this lane's 16 bytes of them
        s_src[j] = s_block[j] + (lane & 7);
    }
    const int c_step = c_super, s_step = s_super;  // uint4s
    int x_row[SETS];
    const uint4* x_src[SETS];
    x_sources<SETS>(x, k, m, first, g, t, x_row, x_src);
    uint4(*my_codes)[T][2][32] = codes_ring<T>(warp);
    uint32_t(*my_scales)[T][32] = ring_scales[warp];
    uint4* my_x = x_slots + (size_t)warp * STAGES * m * 16 + lane_piece(t, 0);  // + (slot * m + row) * 16
    uint64_t* my_bars = ring_bars[bulk ? warp : 0];
    if constexpr (bulk) bulk_prologue<T>(my_codes, my_scales, c_block, s_block, c_step, s_step, steps, my_bars, lane);
    if constexpr (PDL) {
        // the prologue: supersteps 0 .. STAGES - 2 in flight, their weights first (copy group 0
        // holds them all: waiting for group i still means superstep i's weights have landed),
        // then, once the kernels before have finished (wait_for_prerequisites), x. WAIT_FIRST
        // (a diagnostic, mma_gemv.build_cubin wait_first=True) waits before the copies: how long
        // the wait takes with nothing of this warp's in flight (its mark 2 then follows mark 1)
        if constexpr (WAIT_FIRST) wait_for_prerequisites();
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s)
            if (!bulk && s < steps && (streams || s == 0))
                copy_supersteps<T>(my_codes[s], my_scales[s], c_src, s_src, s * c_step, s * s_step, lane);
        if constexpr (L2_RUN) prefetch_run<T>(c_block, s_block, c_step, s_step, STAGES - 1, steps, lane);
        marks.mark(1);
        if constexpr (!WAIT_FIRST) wait_for_prerequisites();
        marks.mark(2);
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) {
            if (bulk) break;
            if (x_ring && s < steps) copy_x_rows<SETS>(my_x + s * m * 16, x_src, s * 16, g, m);
            commit_copies();  // an empty group past the last superstep keeps the wait count uniform
        }
    } else {
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) {  // the prologue: supersteps 0 .. STAGES - 2 in flight
            if (bulk) break;
            if (s < steps && (streams || s == 0)) {
                copy_supersteps<T>(my_codes[s], my_scales[s], c_src, s_src, s * c_step, s * s_step, lane);
                if (x_ring) copy_x_rows<SETS>(my_x + s * m * 16, x_src, s * 16, g, m);
            }
            commit_copies();  // an empty group past the last superstep keeps the wait count uniform
        }
        marks.mark(1);
        marks.mark(2);
    }
    uint4 xv[SETS][4], xn[SETS][4], c0[T], c1[T];
    LaneScales sc[T];
    if (!x_ring) {
        load_sets_x<SETS>(xv, x_src, 0);  // steps >= 1: gemv skips an empty slice
    }
    if (ROW_SCALE == 2 && row_scale != nullptr) early_scales<T>(row_scale, (last_tile + 1) << 4, tile, lane, scale);
    if (ahead || !streams) {
        wait_copies<STAGES - 2>();  // superstep 0 has landed
        __syncwarp();
        read_slot<T>(my_codes[0], my_scales[0], lane, c0, c1, sc);
    }
    float sums[T][2][SETS][4] = {};  // [tile][even, odd MMAs][set] (SETS == 2: [j][0][set] alone)
    uint32_t fold = 0u;  // RING's stand-in for the math
    // STAGES supersteps an iteration, unrolled, so that every ring slot is a constant
    for (int base = 0; base < steps; base += STAGES) {
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            const int i = base + s;
            if (i >= steps) break;
            if (!streams) {
                read_slot<T>(my_codes[0], my_scales[0], lane, c0, c1, sc);
            } else if (bulk) {
                barrier_wait(&my_bars[s], (unsigned)(base / STAGES) & 1u);  // superstep i landed
                __syncwarp();  // and every lane read superstep i - 1's slot, refilled below
                read_slot<T>(my_codes[s], my_scales[s], lane, c0, c1, sc);
            } else if (!ahead) {
                wait_copies<STAGES - 2>();  // this lane's copies of superstep i have landed
                __syncwarp();               // and every lane's
                read_slot<T>(my_codes[s], my_scales[s], lane, c0, c1, sc);
                if (x_ring) {
#pragma unroll
                    for (int set = 0; set < SETS; ++set)
#pragma unroll
                        for (int j = 0; j < 4; ++j)
                            xv[set][j] = my_x[(s * m + x_row[R16_DIAG == 1 ? 0 : set]) * 16 + j * X_STEP];
                }
            }
            if (i == 0) marks.mark(3);  // superstep 0's weights landed (AHEAD, MATH: before the loop)
            // the slot refilled now, (s - 1) mod STAGES, held superstep i - 1, which every lane
            // read before a barrier since (AHEAD: in superstep i - 2, before superstep i - 1's)
            const int next = i + STAGES - 1;
            if (bulk) {
                if (lane == 0 && next < steps) {
                    const int to = (s + STAGES - 1) % STAGES;
                    bulk_superstep<T>(my_codes[to], my_scales[to], c_block, s_block, next * c_step,
                                      next * s_step, &my_bars[to]);
                }
            } else if (streams && next < steps) {
                const int to = (s + STAGES - 1) % STAGES;
                copy_supersteps<T>(my_codes[to], my_scales[to], c_src, s_src, next * c_step,
                                   next * s_step, lane);
                if (x_ring) copy_x_rows<SETS>(my_x + to * m * 16, x_src, (size_t)next * 16, g, m);
            }
            if (!bulk) commit_copies();
            uint4 n0[T], n1[T];
            LaneScales nsc[T] = {};
            if (ahead && i + 1 < steps) {
                wait_copies<STAGES - 2>();  // superstep i + 1 has landed
                __syncwarp();
                const int from = (s + 1) % STAGES;
                read_slot<T>(my_codes[from], my_scales[from], lane, n0, n1, nsc);
            }
            if (!x_ring && !X_ONCE) load_next_x<SETS>(xn, x_src, X_SAME ? -1 : i, steps);
            if constexpr (FORM == RING) {
#pragma unroll
                for (int j = 0; j < T; ++j) fold ^= xor_of(c0[j], c1[j], sc[j]);
                fold_x(fold, xv[0]);
            } else {
#pragma unroll
                for (int j = 0; j < T; ++j) superstep<SETS>(c0[j], c1[j], sc[j], xv, sums[j]);
            }
            if (i == 0) marks.mark(4);
            if (ahead) {
#pragma unroll
                for (int j = 0; j < T; ++j) c0[j] = n0[j], c1[j] = n1[j], sc[j] = nsc[j];
            }
            if (!x_ring && !X_ONCE) take_next_x<SETS>(xv, xn);
        }
    }
    marks.mark(5);
#pragma unroll
    for (int j = 0; j < T; ++j) scaled_sums<SETS>(sums[j], acc[j]);
    if constexpr (FORM == RING) acc[0][0] += (float)(fold & 1u);  // keeps the loads
}

#define REG_STEPS 8  // supersteps a lane of the REGS form has in flight (8: all of K = 4096 at 4 warps a tile)
#define BLOCKS_PER_SM_REGS (12 / WARPS)  // registers for 12 warps a multiprocessor (<= 168 a thread)

template <int SETS, bool FOLD>
__device__ __forceinline__ void accumulate_regs(const uint4* __restrict__ codes,
                                                const uint32_t* __restrict__ scales,
                                                const uint16_t* __restrict__ x, const int k, const int m,
                                                const int c_tile, const int c_super,
                                                const int s_tile, const int s_super, const int tile,
                                                const int first, const int steps, const int lane,
                                                float (&acc)[1][4 * SETS], Marks& marks) {
    // the REGS form: no ring in shared memory but one in registers. Each lane loads its own
    // pieces of a superstep (the 16-byte pieces and scale word(s) that read_slot would take out
    // of the ring: coalesced, 512 bytes a warp a load) straight into registers, REG_STEPS
    // supersteps in flight: the first REG_STEPS all asked for before griddepcontrol.wait (the
    // layout of tools/gpu/read_ceiling.py's read launched with PDL: a warp's whole share of a
    // K = 4096 weight in flight before the wait), and superstep i + REG_STEPS asked for into the
    // registers of superstep i once its MMAs have taken them, so that a long K keeps REG_STEPS
    // in flight rather than waiting for each batch of them.
    // The same MMAs in the same order as PLAIN's (superstep): the same bits. FOLD (the
    // diagnostic REGS_FOLD): the same loads with a XOR fold for the math, the memory side alone.
    const int g = lane >> 2, t = lane & 3;
    const uint4* c_src = codes + tile * c_tile + first * c_super + lane;
    const uint4* s_block = reinterpret_cast<const uint4*>(scales) + tile * s_tile + first * s_super;
    int x_row[SETS];
    const uint4* x_src[SETS];
    x_sources<SETS>(x, k, m, first, g, t, x_row, x_src);
    float sums[2][SETS][4] = {};
    uint32_t fold = 0u;  // FOLD's stand-in for the math
    uint4 xv[SETS][4], xn[SETS][4], c0[REG_STEPS], c1[REG_STEPS];
    LaneScales sc[REG_STEPS];
#pragma unroll
    for (int r = 0; r < REG_STEPS; ++r) {
        const int i = min(r, steps - 1);  // past the last: its own again (cached, unused)
        c0[r] = __ldcg(c_src + i * c_super);
        c1[r] = __ldcg(c_src + i * c_super + 32);
        sc[r] = lane_scales_l2(reinterpret_cast<const uint32_t*>(s_block + i * s_super), lane);
    }
    marks.mark(1);
    if constexpr (PDL) wait_for_prerequisites();
    marks.mark(2);
#pragma unroll
    for (int set = 0; set < SETS; ++set) load_x(xv[set], x_src[set]);
    // REG_STEPS supersteps an iteration, unrolled, so that every register slot is a constant
    for (int base = 0; base < steps; base += REG_STEPS) {
#pragma unroll
        for (int r = 0; r < REG_STEPS; ++r) {
            const int i = base + r;
            if (i >= steps) break;
            load_next_x<SETS>(xn, x_src, i, steps);
            if (i == 0) marks.mark(3);
            if constexpr (FOLD) {
                fold ^= xor_of(c0[r], c1[r], sc[r]);
                fold_x(fold, xv[0]);
            } else {
                superstep<SETS>(c0[r], c1[r], sc[r], xv, sums);
            }
            if (i == 0) marks.mark(4);
            const int next = i + REG_STEPS;
            if (next < steps) {
                c0[r] = __ldcg(c_src + next * c_super);
                c1[r] = __ldcg(c_src + next * c_super + 32);
                sc[r] = lane_scales_l2(reinterpret_cast<const uint32_t*>(s_block + next * s_super), lane);
            }
            take_next_x<SETS>(xv, xn);
        }
    }
    marks.mark(5);
    scaled_sums<SETS>(sums, acc[0]);
    if constexpr (FOLD) acc[0][0] += (float)(fold & 1u);  // keeps the loads
}

template <int FORM, int KW, int SETS, int T>
__device__ __forceinline__ void gemv(GEMV_PARAMS) {
    // PLAIN reads a superstep's codes and scales out of the ring at its top; AHEAD the next
    // one's before computing this one (the shared-memory load's latency under the MMAs; the ring
    // then holds one fewer in flight). Two diagnostics that give no GEMV (the probe's
    // --diagnose): RING streams the weights and x as PLAIN does with a XOR fold for the math
    // (the memory side alone), MATH computes every superstep from the ring's first, copied once
    // (the arithmetic alone). XRING is PLAIN with x in the ring too: the lanes of rows g < m copy
    // their 64 bytes of a superstep with its weights (dynamic shared memory, WARPS x STAGES x m
    // x 256 bytes: mma_gemv.MmaGemv sizes it), and every lane reads its row's from there
    // (the global loads of x, a superstep ahead, were the largest stall under ncu)
    //
    // KW warps share a tile (WARPS / KW tiles a block): warp slice j of them takes the j-th of KW
    // runs of the split's supersteps, the KW sums are added in shared memory in slice order
    // (slice 0's warp then finishes the tile as one warp would): KW times the warps of a launch
    // with no global reduction
    static_assert(WARPS % KW == 0, "KW warps a tile divide the block's WARPS");
    if constexpr (PDL && TRIGGER_START) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    // T tiles a warp (T = 2: the 16-row kernels' ``_t2``): tiles tile .. tile + T - 1
    const int tile = (blockIdx.x * (WARPS / KW) + warp / KW) * T, slice = warp % KW;
    if (tile >= (n >> 4)) return;  // the tile's KW warps together: no barrier below spans tiles
    const int supers = k >> 7;
    const int split_first = blockIdx.y * (groups_per_split >> 3);
    const int split_steps = min(groups_per_split >> 3, supers - split_first);
    const int run = (split_steps + KW - 1) / KW;
    const int first = split_first + slice * run;
    const int steps = min(run, split_steps - slice * run);  // <= 0: a slice past a short split
    Marks marks;
    marks.mark(0);
    float acc[T][4 * SETS] = {};
    float scale[T][2] = {};  // EARLY_SCALES: the tiles' row_scale of this lane's rows (slice 0 finishes)
    constexpr bool regs = FORM == REGS || FORM == REGS_FOLD;  // (no ROW_SCALE 2 place: read at the start)
    if constexpr (ROW_SCALE == 1 || (ROW_SCALE == 2 && regs)) {
        if (slice == 0) early_scales<T>(row_scale, n, tile, lane, scale);
    }
    if constexpr (FORM == REGS || FORM == REGS_FOLD) {
        static_assert(T == 1, "the REGS form takes one tile a warp");
        if (steps > 0) accumulate_regs<SETS, FORM == REGS_FOLD>(codes, scales, x, k, m, c_tile, c_super, s_tile, s_super, tile,
                                             first, steps, lane, acc, marks);
    } else if (steps > 0) {
        accumulate<FORM, SETS, T>(codes, scales, x, k, m, c_tile, c_super, s_tile, s_super,
                                  tile, (n >> 4) - 1, first, steps, warp, lane, acc, marks,
                                  ROW_SCALE == 2 && slice == 0 ? row_scale : nullptr, scale);
    }
    if constexpr (PDL && !TRIGGER_START) {
        // the weights are read: the kernel after this one may launch (its blocks copy their
        // first weights, then wait for this grid to end: griddepcontrol.wait); a block whose
        // tiles are past N exited above, which counts as its trigger
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    }
    if constexpr (KW > 1) {
        // slices 1 .. KW - 1 leave their sums in their own rings (their main loops are done
        // with them: every copy landed and was read), slice 0 adds them in slice order
        if (slice > 0) {
            float* mine = reinterpret_cast<float*>(codes_ring<T>(warp));
            __syncwarp();  // every lane's reads of the ring are done (lane l writes others' codes)
#pragma unroll
            for (int i = 0; i < T * 4 * SETS; ++i) mine[i * 32 + lane] = acc[i / (4 * SETS)][i % (4 * SETS)];
        }
        tile_barrier(1 + warp / KW, 32 * KW);
        if (slice > 0) return marks.record(codes);
#pragma unroll
        for (int j = 1; j < KW; ++j) {
            const float* theirs = reinterpret_cast<const float*>(codes_ring<T>(warp + j));
#pragma unroll
            for (int i = 0; i < T * 4 * SETS; ++i) acc[i / (4 * SETS)][i % (4 * SETS)] += theirs[i * 32 + lane];
        }
    }
    const Epilogue e{part, row_scale, bias, out, counters, pair_tiles, gated};
    if constexpr (T == 2) {
        if (gated && gridDim.y == 1) {
            finish_pair<SETS>(e, m, n, tile, lane, acc, scale);
            return marks.record(codes);
        }
    }
#pragma unroll
    for (int j = 0; j < T; ++j)
        if (tile + j < (n >> 4)) finish<SETS, T>(e, m, n, tile + j, lane, KW, acc[j], scale[j]);
    marks.record(codes);
}

// the forms (mma_gemv.KERNELS, mma_gemv.DIAGNOSTICS), each with 1, 2 or 4 warps a tile
// (mma_gemv.kernel_name: ``_kw2``, ``_kw4``); the GEMV forms for 9 .. 16 rows too (``_r16``:
// two sets of MMA columns, registers for BLOCKS_PER_SM_16 blocks)
#define GEMV_ARGS                                                                                \
    codes, scales, x, part, n, k, m, c_tile, c_super, s_tile, s_super, groups_per_split,          \
        row_scale, bias, out, counters, pair_tiles, gated
#define GEMV_KERNEL(name, FORM, KW, SETS, T, BLOCKS)                                             \
    extern "C" __global__ void __launch_bounds__(32 * WARPS, BLOCKS)                            \
        name(GEMV_PARAMS) {                                                                      \
        gemv<FORM, KW, SETS, T>(GEMV_ARGS);                                                       \
    }
#define GEMV_KERNELS(name, FORM)                                                                 \
    GEMV_KERNEL(name, FORM, 1, 1, 1, BLOCKS_PER_SM) GEMV_KERNEL(name##_kw2, FORM, 2, 1, 1, BLOCKS_PER_SM) \
    GEMV_KERNEL(name##_kw4, FORM, 4, 1, 1, BLOCKS_PER_SM)
#define GEMV_KERNELS_16(name, FORM)                                                              \
    GEMV_KERNEL(name##_r16, FORM, 1, 2, 1, BLOCKS_PER_SM_16)                                     \
    GEMV_KERNEL(name##_kw2_r16, FORM, 2, 2, 1, BLOCKS_PER_SM_16)                                 \
    GEMV_KERNEL(name##_kw4_r16, FORM, 4, 2, 1, BLOCKS_PER_SM_16)
// two tiles a warp at 16 rows (``_t2``: x's fragments, loaded once, feed both tiles' MMAs: half
// the x reads a weight byte), rings of two tiles: built where they fit 48 KiB (STAGES <= 4)
#define GEMV_KERNELS_16_T2(name, FORM)                                                           \
    GEMV_KERNEL(name##_r16_t2, FORM, 1, 2, 2, BLOCKS_PER_SM_16_T2)                               \
    GEMV_KERNEL(name##_kw2_r16_t2, FORM, 2, 2, 2, BLOCKS_PER_SM_16_T2)                           \
    GEMV_KERNEL(name##_kw4_r16_t2, FORM, 4, 2, 2, BLOCKS_PER_SM_16_T2)

#if !MMA_NATURAL  // (the mma.sync kernels read the contiguous and coalesced maps alone)
GEMV_KERNELS(nvfp4_mma_gemv, PLAIN)
GEMV_KERNELS(nvfp4_mma_gemv_ahead, AHEAD)
GEMV_KERNELS(nvfp4_mma_gemv_xring, XRING)
GEMV_KERNELS(nvfp4_mma_gemv_bulk, BULK)
GEMV_KERNELS(nvfp4_mma_gemv_ring, RING)
GEMV_KERNELS(nvfp4_mma_gemv_math, MATH)
#if WARPS == 4
// the REGS form (accumulate_regs; mma_gemv.ONE_SET): registers for BLOCKS_PER_SM_REGS blocks, up
// to 8 rows of x, 1, 2 or 4 warps a tile
GEMV_KERNEL(nvfp4_mma_gemv_regs, REGS, 1, 1, 1, BLOCKS_PER_SM_REGS)
GEMV_KERNEL(nvfp4_mma_gemv_regs_kw2, REGS, 2, 1, 1, BLOCKS_PER_SM_REGS)
GEMV_KERNEL(nvfp4_mma_gemv_regs_kw4, REGS, 4, 1, 1, BLOCKS_PER_SM_REGS)
// its memory side alone (REGS_FOLD; mma_gemv.REGS_DIAGNOSTICS: nvfp4_launch_chain.py's "regs fold")
GEMV_KERNEL(nvfp4_mma_gemv_regs_fold, REGS_FOLD, 1, 1, 1, BLOCKS_PER_SM_REGS)
GEMV_KERNEL(nvfp4_mma_gemv_regs_fold_kw2, REGS_FOLD, 2, 1, 1, BLOCKS_PER_SM_REGS)
GEMV_KERNEL(nvfp4_mma_gemv_regs_fold_kw4, REGS_FOLD, 4, 1, 1, BLOCKS_PER_SM_REGS)
#endif
GEMV_KERNELS_16(nvfp4_mma_gemv, PLAIN)
GEMV_KERNELS_16(nvfp4_mma_gemv_ahead, AHEAD)
GEMV_KERNELS_16(nvfp4_mma_gemv_xring, XRING)
GEMV_KERNELS_16(nvfp4_mma_gemv_bulk, BULK)
#if STAGES <= 4 && WARPS == 4
GEMV_KERNELS_16_T2(nvfp4_mma_gemv, PLAIN)
GEMV_KERNELS_16_T2(nvfp4_mma_gemv_bulk, BULK)
#endif
#if WARPS == 8
// eight warps a tile, a block a tile (a build of 8 warps a block, rings of at most 5 stages:
// mma_gemv.WIDE_WARPS): twice the warps of _kw4 on a weight of few tiles, no global reduction
#define GEMV_KERNELS_KW8(name, FORM)                                                             \
    GEMV_KERNEL(name##_kw8, FORM, 8, 1, 1, BLOCKS_PER_SM) GEMV_KERNEL(name##_kw8_r16, FORM, 8, 2, 1, BLOCKS_PER_SM_16)
GEMV_KERNELS_KW8(nvfp4_mma_gemv, PLAIN)
GEMV_KERNELS_KW8(nvfp4_mma_gemv_ahead, AHEAD)
GEMV_KERNELS_KW8(nvfp4_mma_gemv_xring, XRING)
GEMV_KERNELS_KW8(nvfp4_mma_gemv_bulk, BULK)
GEMV_KERNEL(nvfp4_mma_gemv_ring_kw8, RING, 8, 1, 1, BLOCKS_PER_SM)  // the memory side alone of _kw8
#endif

#endif  // !MMA_NATURAL

#ifndef MMA_WG
#define MMA_WG 0  // 1: the wgmma forms too (mma_gemv.build_cubin wg=True, for sm_90a; mma_gemv.WG_FORMS)
#endif
#ifndef MMA_WG_X_AHEAD
#define MMA_WG_X_AHEAD 1  // supersteps the wgmma forms load x ahead of staging it (build_cubin wg_x_ahead)
#endif
#if MMA_WG && WARPS == 4
// The wgmma forms (mma_gemv.WG_FORMS: ``wg``, its weights copied as PLAIN's, ``wg_bulk`` as
// BULK's): a block is one warpgroup, its four warps four consecutive tiles over the same
// supersteps (one split of K: blockIdx.y), so that a superstep's x is loaded once a block rather
// than once a warp. Each warp loads one of a lane's four 16-byte pieces of x (piece w of its rows
// g and 8 + g: the loads the GEMV's lane makes as its load w) and stores its four words where
// wgmma reads B (x_stage: word i of set s of lane l at [i][s][l], which is MMA u = i / 2's k half
// i % 2 for x rows 8s .. 8s + 7 as K-major core matrices of 8 rows of 16 bytes); the warpgroup's
// eight wgmma m64n(8 SETS)k16 a superstep take A, each warp's decoded fragments of its tile, from
// registers (mma.sync's A fragment is a warp's 16 rows of wgmma's) and B from shared memory, once
// for the four tiles. x through the data path: a quarter of the GEMV's loads, and the tensor
// cores' reads of the stage. One named barrier a superstep: the stage of this superstep written by
// every warp, the other stage's MMAs (the superstep before) done by every warp, so it is refilled.
// Measured slower than the GEMV on every shape (H100; x's staging through registers and K in
// splits: docs/nvfp4.md, thirty-fifth session); no shipped tilings file names it.

__device__ __forceinline__ uint32_t x_descriptor(const uint32_t* at, const int leading_bytes) {
    // the low word of wgmma's descriptor of B in shared memory, K-major, in 16-byte units: the
    // start (bits 0..13) and the leading byte offset (bits 16..29: no swizzle, the k half 8 .. 15
    // leading_bytes on; unused under the 128-byte swizzle); its high word is DESCRIPTOR_HIGH(_SWIZZLED).
    // A 32-bit word, so that a stage's and a MMA's offsets are one add (the start cannot carry
    // past its 14 bits below 256 KiB)
    return ((shared_address(at) & 0x3FFFFu) >> 4) | ((uint32_t)(leading_bytes >> 4) << 16);
}

// the descriptor's high word: the stride byte offset (bits 32..45, x rows 8 .. 15: 128 bytes on
// as core matrices, 1024 as the 128-byte swizzle's atoms of eight 128-byte rows) and the layout
// (bits 62..63: 0 no swizzle, 1 the 128-byte swizzle)
constexpr uint32_t DESCRIPTOR_HIGH = 128 >> 4, DESCRIPTOR_HIGH_SWIZZLED = (1024 >> 4) | (1u << 30);

template <int SETS>
__device__ __forceinline__ void wgmma(float (&d)[4 * SETS], const uint32_t (&a)[4], const uint32_t b,
                                      const uint32_t high);

template <>
__device__ __forceinline__ void wgmma<1>(float (&d)[4], const uint32_t (&a)[4], const uint32_t b,
                                         const uint32_t high) {
    // B's descriptor: low word ``b`` (x_descriptor), high word ``high`` (DESCRIPTOR_HIGH(_SWIZZLED))
    asm volatile(
        "{\n .reg .pred p;\n .reg .b64 desc;\n setp.ne.b32 p, %9, 0;\n mov.b64 desc, {%8, %10};\n"
        " wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, {%4, %5, %6, %7}, desc, p, 1, 1, 0;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b), "r"(1), "r"(high));
}

template <>
__device__ __forceinline__ void wgmma<2>(float (&d)[8], const uint32_t (&a)[4], const uint32_t b,
                                         const uint32_t high) {
    asm volatile(
        "{\n .reg .pred p;\n .reg .b64 desc;\n setp.ne.b32 p, %13, 0;\n mov.b64 desc, {%12, %14};\n"
        " wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, "
        "{%8, %9, %10, %11}, desc, p, 1, 1, 0;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b), "r"(1), "r"(high));
}

template <int SETS>
__device__ __forceinline__ void load_pieces(uint4 (&xr)[SETS], const uint4* const (&x_src)[SETS], const size_t at,
                                            const int q) {
    // the lane's piece q of each set's row, superstep at / 16 (load_x's load q)
#pragma unroll
    for (int set = 0; set < SETS; ++set) xr[set] = x_piece(x_src[set] + at + q * X_STEP);
}

template <int SETS>
__device__ __forceinline__ void stage_pieces(uint32_t (&stage)[16][SETS][32], const uint4 (&xr)[SETS], const int q,
                                             const int lane) {
    // the pieces' words 4q .. 4q + 3 into the stage (generic stores, then the fence that makes
    // them visible to wgmma's reads through the async proxy once the barrier is passed)
#pragma unroll
    for (int set = 0; set < SETS; ++set) {
        stage[4 * q][set][lane] = xr[set].x;
        stage[4 * q + 1][set][lane] = xr[set].y;
        stage[4 * q + 2][set][lane] = xr[set].z;
        stage[4 * q + 3][set][lane] = xr[set].w;
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ __forceinline__ void decode_superstep(const uint4 c0, const uint4 c1, const LaneScales sc, uint32_t (&a)[8][4]) {
    // a warp's eight A fragments of a superstep (its codes and scale words), scaled (superstep's decode)
    const uint32_t words[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
    uint32_t row_g[LANE_GROUPS], row_g8[LANE_GROUPS];
    lane_multipliers(sc, row_g, row_g8);
#pragma unroll
    for (int u = 0; u < 8; ++u) scaled_fragment(words[u], u, row_g, row_g8, a[u]);
}

template <int SETS, bool SWIZZLED = false>
__device__ __forceinline__ uint32_t stage_descriptor(const uint32_t (*stages)[16][SETS][32], const int stage) {
    // x_descriptor of a ring's stage ``stage`` (its first byte): the ring's first, the stage's
    // offset added in 16-byte units (a constant where the stage is). A stage is 16 SETS 128
    // bytes either way: core matrix i of set s at (i SETS + s) 128 (no swizzle: MMA i / 2's k
    // half i % 2; leading offset SETS 128), or (SWIZZLED: the TMA form's) its two 64-column
    // halves of 8 SETS rows of 128 bytes in the 128-byte swizzle, one after the other
    return x_descriptor(&stages[0][0][0][0], SWIZZLED ? 16 : SETS * 128) + (uint32_t)(stage * 16 * SETS * 128 >> 4);
}

template <int SETS, bool SWIZZLED = false>
__device__ __forceinline__ void issue_wgmmas(float (&d)[4 * SETS], const uint32_t (&a)[8][4], const uint32_t stage) {
    // the superstep's eight wgmmas, B from the stage of descriptor ``stage`` (stage_descriptor:
    // MMA u's core matrices 2 SETS 128 bytes on, or, swizzled, in half u / 4 at 32 (u % 4) bytes
    // into its rows), committed
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int u = 0; u < 8; ++u) {
        const uint32_t at = SWIZZLED ? ((u >> 2) * 8 * SETS * 128 + (u & 3) * 32) >> 4 : (u * 2 * SETS * 128) >> 4;
        wgmma<SETS>(d, a[u], stage + at, SWIZZLED ? DESCRIPTOR_HIGH_SWIZZLED : DESCRIPTOR_HIGH);
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

#if !MMA_NATURAL
template <int SETS, bool BULK_W>
__device__ __forceinline__ void accumulate_wg(const uint4* __restrict__ codes, const uint32_t* __restrict__ scales,
                                              const uint16_t* __restrict__ x, const int k, const int m,
                                              const int c_tile, const int c_super, const int s_tile,
                                              const int s_super, const int tile, const int first, const int steps,
                                              const int warp, const int lane, float (&acc)[4 * SETS],
                                              const float* row_scale, const int n, float (&scale)[1][2]) {
    // the warpgroup's sums over supersteps first .. first + steps - 1 (steps >= 1; the same for
    // its four warps) of tiles tile (this warp's; a tile past N reads the last tile's weights
    // again, the caller drops its sums); row_scale given (ROW_SCALE 2): its rows' into scale
    __shared__ __align__(128) uint32_t x_stage[2][16][SETS][32];
    __shared__ __align__(128) uint32_t ring_scales[WARPS][STAGES][1][32];
    __shared__ uint64_t ring_bars[BULK_W ? WARPS : 1][STAGES];
    const int g = lane >> 2, t = lane & 3;
    const uint4* const c_block[1] = {codes + tile * c_tile + first * c_super};
    const uint4* const s_block[1] = {reinterpret_cast<const uint4*>(scales) + tile * s_tile + first * s_super};
    const uint4* const c_src[1] = {c_block[0] + lane};
    const uint4* const s_src[1] = {s_block[0] + (lane & 7)};
    int x_row[SETS];
    const uint4* x_src[SETS];
    x_sources<SETS>(x, k, m, first, g, t, x_row, x_src);
    uint4(*my_codes)[1][2][32] = codes_ring<1>(warp);
    uint32_t(*my_scales)[1][32] = ring_scales[warp];
    uint64_t* my_bars = ring_bars[BULK_W ? warp : 0];
    if constexpr (BULK_W) {
        bulk_prologue<1>(my_codes, my_scales, c_block, s_block, c_super, s_super, steps, my_bars, lane);
    } else {
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) {  // the prologue, weights only: x comes after the wait
            if (s < steps) copy_supersteps<1>(my_codes[s], my_scales[s], c_src, s_src, s * c_super, s * s_super, lane);
            commit_copies();
        }
    }
    if constexpr (PDL) wait_for_prerequisites();
    // (X_ONCE: superstep 0's x staged once and every superstep computed from it; X_SAME: every
    // superstep's pieces loaded and staged from superstep 0's: the diagnostics' sums are wrong)
    // x of superstep j in xr[j % XA] from XA supersteps before it is staged (at superstep j - 1)
    constexpr size_t X_AT = X_SAME ? 0 : 16;  // a superstep's step through x (uint4s)
    constexpr int XA = MMA_WG_X_AHEAD;
    static_assert(XA == 1 || (XA == 2 && STAGES % 2 == 0), "x 1 superstep ahead, or 2 in an even ring");
    uint4 xr[XA][SETS];
    load_pieces<SETS>(xr[0], x_src, 0, warp);
    stage_pieces<SETS>(x_stage[0], xr[0], warp, lane);
    if (ROW_SCALE == 2 && row_scale != nullptr) early_scales<1>(row_scale, n, tile, lane, scale);
#pragma unroll
    for (int j = 1; j <= XA; ++j)
        if (steps > j && !X_ONCE) load_pieces<SETS>(xr[j % XA], x_src, j * X_AT, warp);
    float d[4 * SETS] = {};
    // STAGES supersteps an iteration, unrolled, so that every ring slot is a constant
    for (int base = 0; base < steps; base += STAGES) {
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            const int i = base + s;
            if (i >= steps) break;
            if constexpr (BULK_W) {
                barrier_wait(&my_bars[s], (unsigned)(base / STAGES) & 1u);
            } else {
                wait_copies<STAGES - 2>();
            }
            __syncwarp();  // superstep i landed for every lane, and every lane read i - 1's slot
            const uint4 c0 = my_codes[s][0][0][lane], c1 = my_codes[s][0][1][lane];
            const LaneScales sc = lane_scales(my_scales[s][0], lane);
            const int next = i + STAGES - 1, to = (s + STAGES - 1) % STAGES;
            if constexpr (BULK_W) {
                if (lane == 0 && next < steps)
                    bulk_superstep<1>(my_codes[to], my_scales[to], c_block, s_block, next * c_super, next * s_super,
                                      &my_bars[to]);
            } else {
                if (next < steps)
                    copy_supersteps<1>(my_codes[to], my_scales[to], c_src, s_src, next * c_super, next * s_super, lane);
                commit_copies();
            }
            uint32_t a[8][4];
            decode_superstep(c0, c1, sc, a);
            asm volatile("bar.sync 1, 128;" ::: "memory");  // stage i % 2 written, i - 1's MMAs done: all warps
            issue_wgmmas<SETS>(d, a, stage_descriptor<SETS>(x_stage, X_ONCE ? 0 : i & 1));
            if (i + 1 < steps && !X_ONCE) stage_pieces<SETS>(x_stage[(i + 1) & 1], xr[(i + 1) % XA], warp, lane);
            if (i + 1 + XA < steps && !X_ONCE)
                load_pieces<SETS>(xr[(i + 1) % XA], x_src, (size_t)(i + 1 + XA) * X_AT, warp);
            asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");  // a and d free again
        }
    }
#pragma unroll
    for (int i = 0; i < 4 * SETS; ++i) acc[i] = d[i] * 256.f;  // A was e2m1 * scale * 2^-8
}

#endif  // !MMA_NATURAL

struct __align__(64) TensorMap {
    // CUtensorMap (cuda.h): the TMA forms' map of x, made by the launcher (mma_gemv.MmaGemv,
    // cuTensorMapEncodeTiled: x as (K columns, M rows) bf16, boxes of 64 columns by 8 SETS rows
    // in the 128-byte swizzle, rows past M zeros), passed as a __grid_constant__ parameter
    unsigned long long opaque[16];
};

#if MMA_NATURAL
// The natural build's wgmma forms: the weights stream into each warp's ring as above, and x is
// copied into the warpgroup's ring of stages beside them, STAGES - 1 supersteps ahead, as it lies
// in memory: in the natural column map core matrix p of a set is piece p (columns 8p .. 8p + 7)
// of its eight x rows, so thread (p, g) = (thread / 8, thread % 8) of the warpgroup copies piece p
// of rows g and 8 + g (rows past m zeros) with one 16-byte cp.async each, to row g of core
// matrix (p, set); a warp's copies read 64 contiguous bytes of
// eight rows and write 512 contiguous bytes. KG warpgroups a block (``_kw2``, ``_kw4``: a tile's KG
// warps, one a warpgroup) take the KG runs of the split's supersteps and add their sums in
// shared memory, warpgroup 0 finishing (no splits needed to spread K). Everything in dynamic
// shared memory (WgRings; mma_gemv.wg_shared_bytes sizes it).

template <int SETS, int KG>
struct WgRings {
    // a block's dynamic shared memory (1024-byte aligned): each warpgroup's ring of x stages
    // (first: each stage of SETS 2 KiB on a 1 KiB boundary, as the 128-byte swizzle's atoms need
    // them), each warp's ring of codes and of scale words (the static rings' layout: a warp's
    // codes ring is where ring_floats finds it), each warp's barriers (the bulk form's), each
    // warpgroup's barriers of its x stages (the TMA forms'), in that order
    static constexpr int X_BYTES = KG * STAGES * 16 * SETS * 128;
    static constexpr int CODE_BYTES = 4 * KG * STAGES * 1024, SCALE_BYTES = 4 * KG * STAGES * 128;
    static constexpr int BAR_BYTES = 4 * KG * STAGES * 8;
    uint32_t (*x)[STAGES][16][SETS][32];
    uint4 (*codes)[STAGES][1][2][32];
    uint32_t (*scales)[STAGES][1][32];
    uint64_t (*bars)[STAGES];
    uint64_t (*x_bars)[STAGES];
    __device__ __forceinline__ explicit WgRings(unsigned char* base)
        : x(reinterpret_cast<uint32_t (*)[STAGES][16][SETS][32]>(base)),
          codes(reinterpret_cast<uint4 (*)[STAGES][1][2][32]>(base + X_BYTES)),
          scales(reinterpret_cast<uint32_t (*)[STAGES][1][32]>(base + X_BYTES + CODE_BYTES)),
          bars(reinterpret_cast<uint64_t (*)[STAGES]>(base + X_BYTES + CODE_BYTES + SCALE_BYTES)),
          x_bars(reinterpret_cast<uint64_t (*)[STAGES]>(base + X_BYTES + CODE_BYTES + SCALE_BYTES + BAR_BYTES)) {}
};

template <int SETS>
__device__ __forceinline__ void tma_x_stage(uint32_t (&stage)[16][SETS][32], const TensorMap* x_map,
                                            const int superstep, uint64_t* bar) {
    // a superstep's x (columns 128 superstep .. + 127, rows 0 .. 8 SETS - 1) into a stage by two
    // TMA copies of 64 columns, onto ``bar`` (its bytes expected first); the caller one thread
    const unsigned b = shared_address(bar);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "n"(SETS * 2048) : "memory");
#pragma unroll
    for (int h = 0; h < 2; ++h)
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
            ::"r"(shared_address(&stage[0][0][0]) + h * SETS * 1024), "l"(reinterpret_cast<uint64_t>(x_map)),
              "r"(superstep * 128 + h * 64), "r"(0), "r"(b) : "memory");
}

template <int SETS>
__device__ __forceinline__ void copy_x_stage(uint32_t (&stage)[16][SETS][32], const uint4* const (&x_src)[SETS],
                                             const size_t at, const int g, const int p, const int m) {
    // thread (p, g)'s pieces of a superstep's x (``at``: its first piece) into a stage; a row past
    // m is zeros, read from nowhere (cp.async's source size 0: every copy issued, none in a branch)
#pragma unroll
    for (int set = 0; set < SETS; ++set) {
        const unsigned dst = shared_address(&stage[p][set][4 * g]);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                     ::"r"(dst), "l"(x_src[set] + at), "r"(8 * set + g < m ? 16 : 0) : "memory");
    }
}

template <int SETS, bool BULK_W, int KG, bool TMA>
__device__ __forceinline__ void accumulate_wgn(const uint4* __restrict__ codes, const uint32_t* __restrict__ scales,
                                               const uint16_t* __restrict__ x, const int k, const int m,
                                               const int c_tile, const int c_super, const int s_tile,
                                               const int s_super, const int tile, const int first, const int steps,
                                               const int warp, const int lane, float (&acc)[4 * SETS],
                                               const float* row_scale, const int n, float (&scale)[1][2],
                                               const WgRings<SETS, KG>& rings, const TensorMap* x_map) {
    // the warpgroup's sums over supersteps first .. first + steps - 1 (steps >= 1; the same for its
    // four warps) of tile ``tile`` (this warp's; past N the last tile again, the caller drops its
    // sums); row_scale given (ROW_SCALE 2): its rows' into scale. TMA (the ``_tma`` forms): x's
    // stages filled by the warpgroup's thread 0 with two TMA copies a superstep (``x_map``) onto
    // the stage's barrier, in the async proxy as wgmma reads them (no fence), rows past m zeros
    const int group = warp >> 2, thread = threadIdx.x & 127, g = thread & 7, p = thread >> 3;
    const uint4* const c_block[1] = {codes + tile * c_tile + first * c_super};
    const uint4* const s_block[1] = {reinterpret_cast<const uint4*>(scales) + tile * s_tile + first * s_super};
    const uint4* const c_src[1] = {c_block[0] + lane};
    const uint4* const s_src[1] = {s_block[0] + (lane & 7)};
    const uint4* x_src[SETS];  // piece p of row 8 set + g, superstep first
#pragma unroll
    for (int set = 0; set < SETS; ++set)
        x_src[set] = reinterpret_cast<const uint4*>(x + (size_t)min(8 * set + g, m - 1) * k) + (size_t)first * 16 + p;
    uint4(*my_codes)[1][2][32] = rings.codes[warp];
    uint32_t(*my_scales)[1][32] = rings.scales[warp];
    uint32_t(*stage)[16][SETS][32] = rings.x[group];
    uint64_t* my_bars = rings.bars[warp];
    uint64_t* x_bars = rings.x_bars[group];
    const unsigned barrier = 1 + group;  // the warpgroup's named barrier (0 is __syncthreads')
    if constexpr (TMA) {
        if (thread == 0) {
#pragma unroll
            for (int s = 0; s < STAGES; ++s) barrier_init(&x_bars[s]);
            barrier_init_fence();
        }
        asm volatile("bar.sync %0, 128;" ::"r"(barrier) : "memory");  // initialized for every thread
    }
    // the prologue: supersteps 0 .. STAGES - 2 of the weights (before griddepcontrol.wait), then,
    // once the kernels before have finished, of x, a copy group a superstep (group 0 holds every
    // weight copy of the prologue: waiting for group i still means superstep i's have landed)
    if constexpr (BULK_W) {
        bulk_prologue<1>(my_codes, my_scales, c_block, s_block, c_super, s_super, steps, my_bars, lane);
    } else {
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s)
            if (s < steps) copy_supersteps<1>(my_codes[s], my_scales[s], c_src, s_src, s * c_super, s * s_super, lane);
    }
    if constexpr (PDL) wait_for_prerequisites();
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if constexpr (TMA) {
            if (thread == 0 && s < steps) tma_x_stage<SETS>(stage[s], x_map, first + s, &x_bars[s]);
        } else if (s < steps) {
            copy_x_stage<SETS>(stage[s], x_src, (size_t)s * 16, g, p, m);
        }
        commit_copies();  // an empty group past the last superstep keeps the wait count uniform
    }
    if (ROW_SCALE == 2 && row_scale != nullptr) early_scales<1>(row_scale, n, tile, lane, scale);
    float d[4 * SETS] = {};
    // STAGES supersteps an iteration, unrolled, so that every ring slot is a constant
    for (int base = 0; base < steps; base += STAGES) {
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            const int i = base + s;
            if (i >= steps) break;
            if constexpr (BULK_W) barrier_wait(&my_bars[s], (unsigned)(base / STAGES) & 1u);
            if constexpr (!(BULK_W && TMA)) wait_copies<STAGES - 2>();  // this thread's copies of superstep i landed
            if constexpr (TMA) {
                barrier_wait(&x_bars[s], (unsigned)(base / STAGES) & 1u);  // x of superstep i landed
            } else {
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // its x, for wgmma's reads
            }
            __syncwarp();  // every lane's, and every lane read superstep i - 1's slot
            const uint4 c0 = my_codes[s][0][0][lane], c1 = my_codes[s][0][1][lane];
            const LaneScales sc = lane_scales(my_scales[s][0], lane);
            const int next = i + STAGES - 1, to = (s + STAGES - 1) % STAGES;
            uint32_t a[8][4];
            decode_superstep(c0, c1, sc, a);
            // every thread's x of superstep i has landed, every warp's MMAs of i - 1 are done: the
            // stage they read is refilled with superstep next's, and this warp's slot of i - 1
            // (read before the __syncwarp above) with its weights, in one branch
            asm volatile("bar.sync %0, 128;" ::"r"(barrier) : "memory");
            if (next < steps) {
                if constexpr (BULK_W) {
                    if (lane == 0)
                        bulk_superstep<1>(my_codes[to], my_scales[to], c_block, s_block, next * c_super,
                                          next * s_super, &my_bars[to]);
                } else {
                    copy_supersteps<1>(my_codes[to], my_scales[to], c_src, s_src, next * c_super, next * s_super, lane);
                }
                if constexpr (TMA) {
                    if (thread == 0) tma_x_stage<SETS>(stage[to], x_map, first + next, &x_bars[to]);
                } else {
                    copy_x_stage<SETS>(stage[to], x_src, (size_t)next * 16, g, p, m);
                }
            }
            commit_copies();
            issue_wgmmas<SETS, TMA>(d, a, stage_descriptor<SETS, TMA>(stage, s));
            asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");  // a and d free again
        }
    }
#pragma unroll
    for (int i = 0; i < 4 * SETS; ++i) acc[i] = d[i] * 256.f;  // A was e2m1 * scale * 2^-8
}
#endif  // MMA_NATURAL

template <int SETS, bool BULK_W, int KG, bool TMA = false>
__device__ __forceinline__ void gemv_wg(GEMV_PARAMS, const TensorMap* x_map = nullptr) {
    // tiles 4 blockIdx.x .. + 3, a warp each of each of KG warpgroups (KG > 1: natural builds),
    // over split blockIdx.y, warpgroup j its j-th run of the split's supersteps; the sums of a
    // tile's KG warps added in shared memory in warpgroup order, then the epilogue as the GEMV's
    // (finish: a tile's splits added by its last warp to finish)
    static_assert((KG == 1 && !TMA) || NATURAL, "warpgroups share K, and TMA copies x, in the natural build alone");
    if constexpr (PDL && TRIGGER_START) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, group = KG == 1 ? 0 : warp >> 2;
    const int tile = blockIdx.x * 4 + (KG == 1 ? warp : warp & 3), tiles = n >> 4;
    const int split_first = blockIdx.y * (groups_per_split >> 3);
    const int split_steps = min(groups_per_split >> 3, (k >> 7) - split_first);  // >= 1: splits = ceil(groups / per split)
    const int run = (split_steps + KG - 1) / KG;
    const int first = split_first + group * run;
    const int steps = min(run, split_steps - group * run);  // <= 0: a warpgroup past a short split
    float acc[4 * SETS] = {};
    float scale[1][2] = {};
    if constexpr (ROW_SCALE == 1) {
        if (group == 0) early_scales<1>(row_scale, n, tile, lane, scale);
    }
    const float* late_scale = ROW_SCALE == 2 && group == 0 ? row_scale : nullptr;
#if MMA_NATURAL
    extern __shared__ __align__(1024) unsigned char wg_shared[];
    const WgRings<SETS, KG> rings(wg_shared);
    float* handoff = reinterpret_cast<float*>(rings.codes[0]);  // (ring_floats: the rings are dynamic)
    if (steps > 0)
        accumulate_wgn<SETS, BULK_W, KG, TMA>(codes, scales, x, k, m, c_tile, c_super, s_tile, s_super,
                                              min(tile, tiles - 1), first, steps, warp, lane, acc, late_scale, n,
                                              scale, rings, x_map);
#else
    float* handoff = nullptr;  // (ring_floats: the static rings)
    accumulate_wg<SETS, BULK_W>(codes, scales, x, k, m, c_tile, c_super, s_tile, s_super, min(tile, tiles - 1), first,
                                steps, warp, lane, acc, late_scale, n, scale);
#endif
    if constexpr (PDL && !TRIGGER_START) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if constexpr (KG > 1) {
        // warpgroups 1 .. KG - 1 leave their sums in their warps' code rings (their loops are done
        // with them: every copy landed and was read), warpgroup 0 adds them in order
        if (group > 0) {
            float* mine = ring_floats(handoff, warp);
            __syncwarp();  // every lane's reads of the ring are done (lane l writes others' codes)
#pragma unroll
            for (int i = 0; i < 4 * SETS; ++i) mine[i * 32 + lane] = acc[i];
        }
        __syncthreads();
        if (group > 0) return;
#pragma unroll
        for (int j = 1; j < KG; ++j) {
            const float* theirs = ring_floats(handoff, warp + 4 * j);
#pragma unroll
            for (int i = 0; i < 4 * SETS; ++i) acc[i] += theirs[i * 32 + lane];
        }
    }
    if (tile >= tiles) return;  // (after the loop's barriers: every warp takes part in them)
    const Epilogue e{part, row_scale, bias, out, counters, pair_tiles, gated};
    finish<SETS, 1>(e, m, n, tile, lane, 1, acc, scale[0], handoff);
}

// the wgmma kernels (mma_gemv.WG_FORMS), a warpgroup a block, or in the natural build KG = 2 or 4
// (``_kw2``, ``_kw4``: registers for as many warps a multiprocessor as one warpgroup's blocks)
#define WG_KERNEL(name, SETS, BULK_W, KG, BLOCKS)                                                \
    extern "C" __global__ void __launch_bounds__(128 * KG, BLOCKS) name(GEMV_PARAMS) {            \
        gemv_wg<SETS, BULK_W, KG>(GEMV_ARGS);                                                     \
    }
#define WG_KERNELS(name, BULK_W, KG, SUFFIX)                                                     \
    WG_KERNEL(name##SUFFIX, 1, BULK_W, KG, BLOCKS_PER_SM / KG)                                   \
    WG_KERNEL(name##SUFFIX##_r16, 2, BULK_W, KG, BLOCKS_PER_SM_16 / KG)
WG_KERNELS(nvfp4_mma_gemv_wg, false, 1, )
WG_KERNELS(nvfp4_mma_gemv_wg_bulk, true, 1, )
#if MMA_NATURAL
WG_KERNELS(nvfp4_mma_gemv_wg, false, 2, _kw2)
WG_KERNELS(nvfp4_mma_gemv_wg, false, 4, _kw4)
WG_KERNELS(nvfp4_mma_gemv_wg_bulk, true, 2, _kw2)
WG_KERNELS(nvfp4_mma_gemv_wg_bulk, true, 4, _kw4)
// the TMA forms (mma_gemv.WG_FORMS ``wg_tma``, ``wg_bulk_tma``): x's map a parameter past the GEMV's
#define WG_TMA_KERNEL(name, SETS, BULK_W, KG, BLOCKS)                                            \
    extern "C" __global__ void __launch_bounds__(128 * KG, BLOCKS)                               \
        name(GEMV_PARAMS, const __grid_constant__ TensorMap x_map) {                              \
        gemv_wg<SETS, BULK_W, KG, true>(GEMV_ARGS, &x_map);                                       \
    }
#define WG_TMA_KERNELS(name, BULK_W, KG, SUFFIX)                                                 \
    WG_TMA_KERNEL(name##SUFFIX, 1, BULK_W, KG, BLOCKS_PER_SM / KG)                               \
    WG_TMA_KERNEL(name##SUFFIX##_r16, 2, BULK_W, KG, BLOCKS_PER_SM_16 / KG)
WG_TMA_KERNELS(nvfp4_mma_gemv_wg_tma, false, 1, )
WG_TMA_KERNELS(nvfp4_mma_gemv_wg_tma, false, 2, _kw2)
WG_TMA_KERNELS(nvfp4_mma_gemv_wg_tma, false, 4, _kw4)
WG_TMA_KERNELS(nvfp4_mma_gemv_wg_bulk_tma, true, 1, )
WG_TMA_KERNELS(nvfp4_mma_gemv_wg_bulk_tma, true, 2, _kw2)
WG_TMA_KERNELS(nvfp4_mma_gemv_wg_bulk_tma, true, 4, _kw4)
#endif
#endif

// The weight itself, for x of prefill sizes (mma_gemv.MmaGemv.dequantize, kernels.MmaKernel): from
// the same words and scale codes (any memory order: the block strides as the GEMV takes them),
//
//   w[r, c] = bf16(e2m1(code[r, c]) * scale[r, c / 16] * row_scale[r])   (N, K) row-major
//
// with rows in W's order ([gate | up] again for a paired weight; row_scale in the kernel's order).
// A lane decodes its eight words of a (tile, superstep) block as the GEMV does (fragments,
// multiplier: e2m1 * scale * 2^-8, exact in bf16), times 256 * row_scale in float32 (the product
// rounded once, as triton_gemm.dequantize_weight rounds it; 256 is a power of two), to bf16: rows
// g and g + 8 at its 32 columns of the superstep (decode_block; lane_piece). Two forms: ``direct``,
// a warp a block, each lane storing its four 16-byte pieces of each row (contiguous map: a warp's
// store touches 32 sectors half), and ``staged``, a warp DQ_BLOCKS blocks, their loads issued
// first, each block's 16 rows passed through shared memory so that a store writes two whole
// 256-byte row pieces.

#define DQ_BLOCKS 4  // (tile, superstep) blocks a warp of the staged form

struct DequantArgs {
    const uint4* codes;
    const uint32_t* scales;
    int n, k, c_tile, c_super, s_tile, s_super;
    const float* row_scale;
    uint16_t* out;
    int pair_tiles;
};

__device__ __forceinline__ void load_block(const DequantArgs& a, const int tile, const int s, const int lane,
                                           uint4& c0, uint4& c1, LaneScales& sc) {
    const uint4* c = a.codes + (size_t)tile * a.c_tile + (size_t)s * a.c_super;
    c0 = c[lane];
    c1 = c[32 + lane];
    sc = lane_scales(reinterpret_cast<const uint32_t*>(reinterpret_cast<const uint4*>(a.scales) +
                                                       (size_t)tile * a.s_tile + (size_t)s * a.s_super), lane);
}

__device__ __forceinline__ void decode_block(const DequantArgs& a, const int tile, const int lane, const uint4 c0,
                                             const uint4 c1, const LaneScales sc, uint32_t (&packed)[2][16]) {
    // packed[rs][j]: row g + 8 rs, the lane's columns of MMA j / 2, cp = j % 2 (columns 2cp,
    // 2cp + 1 of its four) as bf16x2: packed[rs][4q .. 4q + 3] are piece lane_piece(t, q) of the
    // row (natural: packed[rs][j] is word t of piece j; store_lane_row)
    const int g = lane >> 2;
    const uint32_t words[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
    uint32_t mult[2][LANE_GROUPS];  // rows g, g + 8
    lane_multipliers(sc, mult[0], mult[1]);
    const float times[2] = {256.0f * a.row_scale[tile * 16 + g], 256.0f * a.row_scale[tile * 16 + g + 8]};
#pragma unroll
    for (int u = 0; u < 8; ++u) {
        uint32_t f[4];
        fragments(words[u], f);
#pragma unroll
        for (int r = 0; r < 4; ++r) {  // register r = 2 cp + rs: row g + 8 rs, columns 4u + 2cp, + 1
            const int rs = r & 1, cp = r >> 1;
            const uint32_t v = mul_bf16x2(f[r], mult[rs][mma_group(u)]);
            const float lo = __fmul_rn(__uint_as_float(v << 16), times[rs]);
            const float hi = __fmul_rn(__uint_as_float(v & 0xFFFF0000u), times[rs]);
            packed[rs][2 * u + cp] = (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
                                     ((uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16);
        }
    }
}

__device__ __forceinline__ void store_lane_row(uint4* pieces, const uint32_t (&packed)[16], const int t) {
    // a lane's columns of one row of a (tile, superstep) block (decode_block's packed[rs]) into the
    // row's 16 pieces at ``pieces``: four whole pieces (lane_piece), or natural word t of each piece
#if MMA_NATURAL
#pragma unroll
    for (int j = 0; j < 16; ++j) reinterpret_cast<uint32_t*>(pieces + j)[t] = packed[j];
#else
#pragma unroll
    for (int q = 0; q < 4; ++q)
        pieces[lane_piece(t, q)] = make_uint4(packed[4 * q], packed[4 * q + 1], packed[4 * q + 2], packed[4 * q + 3]);
#endif
}

#define DEQUANT_PARAMS                                                                           \
    const uint4 *__restrict__ codes, const uint32_t *__restrict__ scales, int n, int k, int c_tile, \
        int c_super, int s_tile, int s_super, const float *__restrict__ row_scale,               \
        uint16_t *__restrict__ out, int pair_tiles
#define DEQUANT_ARGS {codes, scales, n, k, c_tile, c_super, s_tile, s_super, row_scale, out, pair_tiles}

extern "C" __global__ void __launch_bounds__(32 * WARPS) nvfp4_mma_dequant(DEQUANT_PARAMS) {
    const DequantArgs a = DEQUANT_ARGS;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int supers = k / 128;
    const long block = (long)blockIdx.x * WARPS + (threadIdx.x >> 5);
    const int tile = (int)(block / supers), s = (int)(block % supers);
    if (tile >= n / 16) return;
    uint4 c0, c1;
    LaneScales sc;
    load_block(a, tile, s, lane, c0, c1, sc);
    uint32_t packed[2][16];
    decode_block(a, tile, lane, c0, c1, sc, packed);
#pragma unroll
    for (int rs = 0; rs < 2; ++rs)
        store_lane_row(reinterpret_cast<uint4*>(out + (size_t)paired_row(pair_tiles, tile * 16 + g + 8 * rs) * k + s * 128),
                       packed[rs], t);
}

extern "C" __global__ void __launch_bounds__(32 * WARPS) nvfp4_mma_dequant_staged(DEQUANT_PARAMS) {
    __shared__ __align__(16) uint4 stage[WARPS][16][17];  // a block's 16 rows of 16 pieces (+1: banks)
    const DequantArgs a = DEQUANT_ARGS;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int supers = k / 128;
    const long blocks = (long)(n / 16) * supers;
    const long first = ((long)blockIdx.x * WARPS + warp) * DQ_BLOCKS;
    uint4 c0[DQ_BLOCKS], c1[DQ_BLOCKS];
    LaneScales sc[DQ_BLOCKS];
#pragma unroll
    for (int j = 0; j < DQ_BLOCKS; ++j)  // every load first: DQ_BLOCKS blocks in flight a warp
        if (first + j < blocks)
            load_block(a, (int)((first + j) / supers), (int)((first + j) % supers), lane, c0[j], c1[j], sc[j]);
#pragma unroll
    for (int j = 0; j < DQ_BLOCKS; ++j) {
        if (first + j >= blocks) return;
        const int tile = (int)((first + j) / supers), s = (int)((first + j) % supers);
        uint32_t packed[2][16];
        decode_block(a, tile, lane, c0[j], c1[j], sc[j], packed);
#pragma unroll
        for (int rs = 0; rs < 2; ++rs) store_lane_row(stage[warp][g + 8 * rs], packed[rs], t);
        __syncwarp();
#pragma unroll
        for (int i = 0; i < 8; ++i) {  // rows 2i, 2i + 1: 16 lanes a row, 16 bytes a lane
            const int row = 2 * i + (lane >> 4), piece = lane & 15;
            reinterpret_cast<uint4*>(out + (size_t)paired_row(pair_tiles, tile * 16 + row) * k + s * 128)[piece] =
                stage[warp][row][piece];
        }
        __syncwarp();
    }
}
