// saxpy: the smallest kernel that proves code for this device was found, loaded and launched.
#include <hip/hip_runtime.h>
#include "cairn_smoke.h"

__global__ void cairn_saxpy_kernel(int n, float a, const float *x, float *y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

extern "C" void cairn_saxpy_cpu(int n, float a, const float *x, float *y) {
    for (int i = 0; i < n; ++i) y[i] = a * x[i] + y[i];
}

extern "C" int cairn_saxpy_gpu(int n, float a, const float *x, float *y) {
    if (n < 0 || (n > 0 && (!x || !y))) return CAIRN_E_BAD_ARGUMENT;
    if (cairn_device_count() <= 0) return CAIRN_E_NO_DEVICE;
    int status = 0;
    float *dx = nullptr, *dy = nullptr;
    size_t bytes = (size_t)n * sizeof(float);
    CAIRN_TRY(hipMalloc(&dx, bytes));
    CAIRN_TRY(hipMalloc(&dy, bytes));
    CAIRN_TRY(hipMemcpy(dx, x, bytes, hipMemcpyHostToDevice));
    CAIRN_TRY(hipMemcpy(dy, y, bytes, hipMemcpyHostToDevice));
    hipLaunchKernelGGL(cairn_saxpy_kernel, dim3((n + 255) / 256), dim3(256), 0, 0, n, a, dx, dy);
    CAIRN_TRY(hipGetLastError());
    CAIRN_TRY(hipMemcpy(y, dy, bytes, hipMemcpyDeviceToHost));
done:
    if (dx) (void)hipFree(dx);
    if (dy) (void)hipFree(dy);
    return status;
}
