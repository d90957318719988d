// Device discovery and error text, shared by every smoke kernel.
#include <hip/hip_runtime.h>
#include <string.h>
#include "cairn_smoke.h"

extern "C" int cairn_device_count(void) {
    int count = 0;
    hipError_t status = hipGetDeviceCount(&count);
    if (status == hipErrorNoDevice) return 0;
    if (status != hipSuccess) return -(int)status;
    return count;
}

extern "C" const char *cairn_error_string(int code) {
    if (code == 0) return "success";
    if (code == CAIRN_E_BAD_ARGUMENT) return "cairn: bad argument (null pointer or negative size)";
    if (code == CAIRN_E_NO_DEVICE) return "cairn: no HIP device available";
    if (code < 0) code = -code;
    const char *text = hipGetErrorString((hipError_t)code);
    return text ? text : "unknown HIP error";
}

extern "C" int cairn_device_arch(int device, char *buf, int len) {
    if (!buf || len <= 0) return CAIRN_E_BAD_ARGUMENT;
    if (cairn_device_count() <= device) return CAIRN_E_NO_DEVICE;
    hipDeviceProp_t props;
    hipError_t status = hipGetDeviceProperties(&props, device);
    if (status != hipSuccess) return (int)status;
    strncpy(buf, props.gcnArchName, (size_t)len - 1);
    buf[len - 1] = '\0';
    return 0;
}
