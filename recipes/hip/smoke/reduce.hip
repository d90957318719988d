// A block reduction: exercises shared memory trees and many blocks; partial sums finish on the host.
#include <hip/hip_runtime.h>
#include <stdlib.h>
#include "cairn_smoke.h"

#define BLOCK 256

__global__ void cairn_reduce_kernel(int n, const float *x, float *partial) {
    __shared__ float scratch[BLOCK];
    int i = blockIdx.x * BLOCK + threadIdx.x;
    scratch[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int stride = BLOCK / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) scratch[threadIdx.x] += scratch[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = scratch[0];
}

extern "C" void cairn_reduce_sum_cpu(int n, const float *x, double *out) {
    double acc = 0.0;
    for (int i = 0; i < n; ++i) acc += x[i];
    *out = acc;
}

extern "C" int cairn_reduce_sum_gpu(int n, const float *x, double *out) {
    if (n < 0 || !out || (n > 0 && !x)) return CAIRN_E_BAD_ARGUMENT;
    if (cairn_device_count() <= 0) return CAIRN_E_NO_DEVICE;
    int status = 0;
    int blocks = n > 0 ? (n + BLOCK - 1) / BLOCK : 1;
    float *dx = nullptr, *dpartial = nullptr;
    float *partial = (float *)calloc((size_t)blocks, sizeof(float));
    if (!partial) return CAIRN_E_BAD_ARGUMENT;
    CAIRN_TRY(hipMalloc(&dx, (size_t)(n > 0 ? n : 1) * sizeof(float)));
    CAIRN_TRY(hipMalloc(&dpartial, (size_t)blocks * sizeof(float)));
    if (n > 0) CAIRN_TRY(hipMemcpy(dx, x, (size_t)n * sizeof(float), hipMemcpyHostToDevice));
    hipLaunchKernelGGL(cairn_reduce_kernel, dim3(blocks), dim3(BLOCK), 0, 0, n, dx, dpartial);
    CAIRN_TRY(hipGetLastError());
    CAIRN_TRY(hipMemcpy(partial, dpartial, (size_t)blocks * sizeof(float), hipMemcpyDeviceToHost));
    {
        double acc = 0.0;
        for (int b = 0; b < blocks; ++b) acc += partial[b];
        *out = acc;
    }
done:
    if (dx) (void)hipFree(dx);
    if (dpartial) (void)hipFree(dpartial);
    free(partial);
    return status;
}
