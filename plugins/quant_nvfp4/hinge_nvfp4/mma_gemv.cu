// NVFP4 W4A16 GEMV on the tensor cores (docs/nvfp4.md, "The tensor-core GEMV on paper"), compiled
// and launched by hinge_nvfp4/mma_gemv.py: kernel = "mma" (experimental) runs the async kernel for
// decode GEMVs; tools/gpu/nvfp4_mma_probe.py times both.
//
//   part[s, m, n] = sum over the scale groups j of split s of
//                   scale[n, j] * sum_{c < 16} e2m1(code[n, 16 j + c]) * x[m, 16 j + c]
//
// for M <= 8 rows of x (the B operand's columns) and N a multiple of 16 (one warp per 16-row
// tile). One mma.sync.m16n8k16 (bf16 in, float32 out) per (tile, group): lane (g, t) = (lane / 4,
// lane % 4) holds its whole A fragment as one 32-bit word of 8 codes, repacked at load time so that
// nibbles k and k + 4 are the low and high halves of fragment register k (rows g / g + 8, columns
// 2t, 2t + 1 / 2t + 8, 2t + 9). Register k is the codes' bits placed as a bf16 pattern (sign at 15,
// exponent bits 8..7, mantissa bit 6) whose value is e2m1 * 2^-126, made exact by one bf16x2
// multiply by 2^126; the group's MMA starts from zero and its float32 result is scaled by the
// group's e4m3 scale (float from its bits times 2^120) into the lane's four accumulators. The
// caller sums the splits and applies the per-tensor scale, or the kernel does (``Epilogue``).
//
// Layouts: codes (N / 16, K / 64, 32, 4) uint32 (four groups a lane per 16-byte load, the warp's
// 512 bytes contiguous); scales (N, K / 16) e4m3 bits as ModelOpt writes them (four groups a row
// per 4-byte load); x (M, K) bf16 rows; part (splits, M, N) float32 sums, or with ``out`` given
// out (M, N) bf16 = sum * row_scale[n] (+ bias[n]), the splits added in the kernel (``Epilogue``).
// K % 64 == 0 and groups_per_split % 4 == 0.
//
// Two kernels, one arithmetic (``mma_step``): ``nvfp4_mma_gemv`` loads a step's codes and scales
// into registers and uses them at once (a warp has one 16-byte load in flight: 36% of the H200's
// roofline at best, 2026-12-02); ``nvfp4_mma_gemv_async`` copies them into shared memory with
// cp.async ``STAGES - 1`` steps ahead of the step it computes (each warp its own ring of stages,
// no block barrier), so a warp keeps that many steps' loads in flight. (Unrolling the register
// loop did not do it: ptxas sank each load next to its first use.)

#include <cuda_bf16.h>
#include <stdint.h>

#ifndef STAGES
#define STAGES 4  // the async kernel's ring of steps a warp (mma_gemv.build_cubin sets it)
#endif

template <int PAIR>
__device__ __forceinline__ uint32_t fragment(uint32_t w) {
    // nibble PAIR -> bits 15 (sign), 8..6 (e1 e0 m) of the low half; nibble PAIR + 4 -> the high
    const uint32_t mag = (PAIR * 4 <= 6) ? (w << (6 - 4 * PAIR)) : (w >> (4 * PAIR - 6));
    const uint32_t sign = w << (12 - 4 * PAIR);
    return (mag & 0x01C001C0u) | (sign & 0x80008000u);
}

__device__ __forceinline__ uint32_t mul_bf16x2(uint32_t a, uint32_t b) {
    uint32_t d;
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

__device__ __forceinline__ float e4m3(uint32_t bits) {
    // non-negative e4m3 -> float: its exponent and mantissa bits at float's, times 2^120 (exact,
    // subnormal scales included)
    return __uint_as_float((bits & 0x7Fu) << 20) * 0x1p120f;
}

__device__ __forceinline__ void mma_step(const uint4 w4, const uint32_t sc_lo, const uint32_t sc_hi,
                                         const uint32_t* x_row, const bool live, const int j,
                                         const int t, float& acc0, float& acc1, float& acc2,
                                         float& acc3) {
    // groups j .. j + 3 of the lane's tile: one MMA each, scaled into the accumulators in order
    const uint32_t two126 = 0x7E807E80u;  // bf16x2 (2^126, 2^126)
    const uint32_t words[4] = {w4.x, w4.y, w4.z, w4.w};
#pragma unroll
    for (int u = 0; u < 4; ++u) {
        const uint32_t w = words[u];
        const uint32_t a0 = mul_bf16x2(fragment<0>(w), two126);
        const uint32_t a1 = mul_bf16x2(fragment<1>(w), two126);
        const uint32_t a2 = mul_bf16x2(fragment<2>(w), two126);
        const uint32_t a3 = mul_bf16x2(fragment<3>(w), two126);
        const int col = (j + u) * 8 + t;  // x's bf16 pairs: element 16 (j + u) + 2t
        const uint32_t b0 = live ? __ldg(x_row + col) : 0u;
        const uint32_t b1 = live ? __ldg(x_row + col + 4) : 0u;
        float d0, d1, d2, d3;
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %10, %10, %10};"
            : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.f));
        const float lo = e4m3((sc_lo >> (8 * u)) & 0xFFu);
        const float hi = e4m3((sc_hi >> (8 * u)) & 0xFFu);
        acc0 = fmaf(d0, lo, acc0);
        acc1 = fmaf(d1, lo, acc1);
        acc2 = fmaf(d2, hi, acc2);
        acc3 = fmaf(d3, hi, acc3);
    }
}

// both kernels' parameters (mma_gemv.MmaGemv passes them in this order)
#define GEMV_PARAMS                                                                              \
    const uint4 *__restrict__ codes, const uint8_t *__restrict__ scales,                         \
        const uint16_t *__restrict__ x, float *__restrict__ part, int n, int k, int m,           \
        int groups_per_split, const float *__restrict__ row_scale,                               \
        const uint16_t *__restrict__ bias, uint16_t *__restrict__ out, int *__restrict__ counters

struct Epilogue {
    // out == nullptr: float32 sums into part[split, m, n] (the caller adds the splits and scales);
    // else out[m, n] = bf16(sum * row_scale[n] + bias[n]) (bias may be nullptr), written by the
    // one split, or with several by the last warp of a tile to finish: each split's warp stores
    // its sums into part and counts itself in counters[tile]; the last one adds the splits in
    // order 0, 1, ... (the same bits whichever finishes last) and sets the count back to 0
    float* part;
    const float* row_scale;
    const uint16_t* bias;
    uint16_t* out;
    int* counters;
};

__device__ __forceinline__ void finish(const Epilogue& e, const int m, const int n, const int tile,
                                       const int lane, float (&acc)[4]) {
    // lane (g, t) holds D's (row g, columns 2t, 2t + 1) and (row g + 8, ...): W rows, x rows
    const int g = lane >> 2, t = lane & 3;
    const bool direct = e.out != nullptr && gridDim.y == 1;
    int rows[4], cols[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        rows[i] = tile * 16 + g + 8 * (i >> 1);
        cols[i] = 2 * t + (i & 1);
    }
    if (!direct) {
#pragma unroll
        for (int i = 0; i < 4; ++i)
            if (cols[i] < m) e.part[((size_t)blockIdx.y * m + cols[i]) * n + rows[i]] = acc[i];
        if (e.out == nullptr) return;
        __threadfence();  // this lane's sums are visible before the warp counts itself
        __syncwarp();
        int last = 0;
        if (lane == 0) last = atomicAdd(&e.counters[tile], 1) == (int)gridDim.y - 1;
        if (!__shfl_sync(0xFFFFFFFFu, last, 0)) return;
        __threadfence();
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            acc[i] = 0.f;
            if (cols[i] < m)
                for (int s = 0; s < (int)gridDim.y; ++s)  // L2 reads: other SMs wrote them
                    acc[i] += __ldcg(&e.part[((size_t)s * m + cols[i]) * n + rows[i]]);
        }
        if (lane == 0) e.counters[tile] = 0;  // ready for the next launch
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        if (cols[i] >= m) continue;
        float y = acc[i] * e.row_scale[rows[i]];
        if (e.bias != nullptr) y += __bfloat162float(__ushort_as_bfloat16(e.bias[rows[i]]));
        e.out[(size_t)cols[i] * n + rows[i]] = __bfloat16_as_ushort(__float2bfloat16_rn(y));
    }
}

extern "C" __global__ void __launch_bounds__(128)
nvfp4_mma_gemv(GEMV_PARAMS) {
    const int lane = threadIdx.x & 31;
    const int tile = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (tile >= (n >> 4)) return;
    const int groups = k >> 4;
    const int g = lane >> 2, t = lane & 3;
    const int j0 = blockIdx.y * groups_per_split;
    const int j1 = min(j0 + groups_per_split, groups);
    const uint4* w_ptr = codes + (size_t)tile * (groups >> 2) * 32 + lane;
    const uint8_t* s_lo = scales + (size_t)(tile * 16 + g) * groups;
    const uint8_t* s_hi = s_lo + (size_t)8 * groups;
    const bool live = g < m;  // B's column g is x's row g
    const uint32_t* x_row = reinterpret_cast<const uint32_t*>(x + (size_t)(live ? g : 0) * k);
    float acc0 = 0.f, acc1 = 0.f, acc2 = 0.f, acc3 = 0.f;
    for (int j = j0; j < j1; j += 4) {
        const uint4 w4 = __ldg(w_ptr + (size_t)(j >> 2) * 32);
        const uint32_t sc_lo = __ldg(reinterpret_cast<const uint32_t*>(s_lo + j));
        const uint32_t sc_hi = __ldg(reinterpret_cast<const uint32_t*>(s_hi + j));
        mma_step(w4, sc_lo, sc_hi, x_row, live, j, t, acc0, acc1, acc2, acc3);
    }
    float acc[4] = {acc0, acc1, acc2, acc3};
    finish(Epilogue{part, row_scale, bias, out, counters}, m, n, tile, lane, acc);
}

__device__ __forceinline__ void copy_async(void* dst, const void* src, const int bytes) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    if (bytes == 16) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(src) : "memory");
    } else {
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(s), "l"(src) : "memory");
    }
}

__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int PENDING>
__device__ __forceinline__ void wait_copies() {
    asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory");
}

extern "C" __global__ void __launch_bounds__(128)
nvfp4_mma_gemv_async(GEMV_PARAMS) {
    // per warp a ring of STAGES steps: 32 lanes x 16 bytes of codes, 16 rows x 4 bytes of scales
    __shared__ uint4 ring_codes[4][STAGES][32];
    __shared__ uint32_t ring_scales[4][STAGES][16];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int tile = blockIdx.x * (blockDim.x >> 5) + warp;
    if (tile >= (n >> 4)) return;  // the whole warp: no barrier below spans warps
    const int groups = k >> 4;
    const int g = lane >> 2, t = lane & 3;
    const int j0 = blockIdx.y * groups_per_split;
    const int steps = (min(j0 + groups_per_split, groups) - j0) >> 2;
    const uint4* w_ptr = codes + (size_t)tile * (groups >> 2) * 32 + (j0 >> 2) * 32 + lane;
    // lanes 0..15 copy row (tile * 16 + lane)'s four scales of a step
    const uint8_t* s_row = scales + (size_t)(tile * 16 + (lane & 15)) * groups + j0;
    const bool live = g < m;
    const uint32_t* x_row = reinterpret_cast<const uint32_t*>(x + (size_t)(live ? g : 0) * k);
    uint4(*my_codes)[32] = ring_codes[warp];
    uint32_t(*my_scales)[16] = ring_scales[warp];
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {  // the prologue: steps 0 .. STAGES - 2 in flight
        if (s < steps) {
            copy_async(&my_codes[s][lane], w_ptr + (size_t)s * 32, 16);
            if (lane < 16) copy_async(&my_scales[s][lane], s_row + 4 * s, 4);
        }
        commit_copies();  // an empty group past the last step keeps the wait count uniform
    }
    float acc0 = 0.f, acc1 = 0.f, acc2 = 0.f, acc3 = 0.f;
    for (int i = 0; i < steps; ++i) {
        wait_copies<STAGES - 2>();  // this lane's copies of step i have landed
        __syncwarp();               // and every lane's
        const int slot = i % STAGES;
        const uint4 w4 = my_codes[slot][lane];
        const uint32_t sc_lo = my_scales[slot][g], sc_hi = my_scales[slot][g + 8];
        // the slot refilled now held step i - 1, which every lane read before the barrier above
        const int next = i + STAGES - 1;
        if (next < steps) {
            copy_async(&my_codes[next % STAGES][lane], w_ptr + (size_t)next * 32, 16);
            if (lane < 16) copy_async(&my_scales[next % STAGES][lane], s_row + 4 * next, 4);
        }
        commit_copies();
        mma_step(w4, sc_lo, sc_hi, x_row, live, j0 + 4 * i, t, acc0, acc1, acc2, acc3);
    }
    float acc[4] = {acc0, acc1, acc2, acc3};
    finish(Epilogue{part, row_scale, bias, out, counters}, m, n, tile, lane, acc);
}
