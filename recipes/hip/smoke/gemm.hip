// A small tiled GEMM: exercises shared memory, barriers and 2-D launches.
#include <hip/hip_runtime.h>
#include "cairn_smoke.h"

#define TILE 16

__global__ void cairn_gemm_kernel(int m, int n, int k, const float *a, const float *b, float *c) {
    __shared__ float tile_a[TILE][TILE];
    __shared__ float tile_b[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < (k + TILE - 1) / TILE; ++t) {
        int ak = t * TILE + threadIdx.x;
        int bk = t * TILE + threadIdx.y;
        tile_a[threadIdx.y][threadIdx.x] = (row < m && ak < k) ? a[row * k + ak] : 0.0f;
        tile_b[threadIdx.y][threadIdx.x] = (bk < k && col < n) ? b[bk * n + col] : 0.0f;
        __syncthreads();
        for (int i = 0; i < TILE; ++i) acc += tile_a[threadIdx.y][i] * tile_b[i][threadIdx.x];
        __syncthreads();
    }
    if (row < m && col < n) c[row * n + col] = acc;
}

extern "C" void cairn_gemm_cpu(int m, int n, int k, const float *a, const float *b, float *c) {
    for (int r = 0; r < m; ++r)
        for (int col = 0; col < n; ++col) {
            float acc = 0.0f;
            for (int i = 0; i < k; ++i) acc += a[r * k + i] * b[i * n + col];
            c[r * n + col] = acc;
        }
}

extern "C" int cairn_gemm_gpu(int m, int n, int k, const float *a, const float *b, float *c) {
    if (m < 0 || n < 0 || k < 0 || !a || !b || !c) return CAIRN_E_BAD_ARGUMENT;
    if (cairn_device_count() <= 0) return CAIRN_E_NO_DEVICE;
    int status = 0;
    float *da = nullptr, *db = nullptr, *dc = nullptr;
    size_t size_a = (size_t)m * k * sizeof(float), size_b = (size_t)k * n * sizeof(float);
    size_t size_c = (size_t)m * n * sizeof(float);
    CAIRN_TRY(hipMalloc(&da, size_a));
    CAIRN_TRY(hipMalloc(&db, size_b));
    CAIRN_TRY(hipMalloc(&dc, size_c));
    CAIRN_TRY(hipMemcpy(da, a, size_a, hipMemcpyHostToDevice));
    CAIRN_TRY(hipMemcpy(db, b, size_b, hipMemcpyHostToDevice));
    hipLaunchKernelGGL(cairn_gemm_kernel, dim3((n + TILE - 1) / TILE, (m + TILE - 1) / TILE), dim3(TILE, TILE), 0, 0,
                       m, n, k, da, db, dc);
    CAIRN_TRY(hipGetLastError());
    CAIRN_TRY(hipMemcpy(c, dc, size_c, hipMemcpyDeviceToHost));
done:
    if (da) (void)hipFree(da);
    if (db) (void)hipFree(db);
    if (dc) (void)hipFree(dc);
    return status;
}
