// Cairn smoke kernels: the C ABI that release gates call through Python ctypes.
//
// Every *_gpu function returns 0 on success or a hipError_t value (never aborts, never prints), so a
// gate on a machine without a GPU gets a clean "no device" code instead of a crash. cairn_error_string()
// turns any such code into text. Every *_cpu function is the reference the GPU result is compared with.
#ifndef CAIRN_SMOKE_H
#define CAIRN_SMOKE_H

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable HIP devices; a negative hipError_t when the runtime cannot even count them. */
int cairn_device_count(void);
/* Text for a code returned by any cairn_* function. Never NULL. */
const char *cairn_error_string(int code);
/* Name of the device's ISA, e.g. "gfx90a:sramecc+:xnack-", into buf; returns 0 or a hipError_t. */
int cairn_device_arch(int device, char *buf, int len);

/* y = a*x + y over n floats. */
int cairn_saxpy_gpu(int n, float a, const float *x, float *y);
void cairn_saxpy_cpu(int n, float a, const float *x, float *y);

/* C(m x n) = A(m x k) * B(k x n), row-major floats, shared-memory tiles of 16 x 16. */
int cairn_gemm_gpu(int m, int n, int k, const float *a, const float *b, float *c);
void cairn_gemm_cpu(int m, int n, int k, const float *a, const float *b, float *c);

/* *out = sum of n floats (accumulated in double on the CPU side of both paths). */
int cairn_reduce_sum_gpu(int n, const float *x, double *out);
void cairn_reduce_sum_cpu(int n, const float *x, double *out);

#ifdef __cplusplus
}
#endif

/* Internal to the .hip files: return the first failing HIP call's code. */
#define CAIRN_TRY(call)                      \
    do {                                     \
        hipError_t cairn_status_ = (call);   \
        if (cairn_status_ != hipSuccess) {   \
            status = (int)cairn_status_;     \
            goto done;                       \
        }                                    \
    } while (0)

#define CAIRN_E_BAD_ARGUMENT 1001
#define CAIRN_E_NO_DEVICE 1002

#endif
