/*
 * TEST-ONLY stand-in for the CUDA driver library (libcuda.so.1). Never ship it,
 * never put it on a library path outside test/cudnn's deviceless tiers
 * (conftest.py's deviceless_env), which compile it into a temporary directory
 * and load it only in subprocesses.
 *
 * Why it exists: cuDNN's deviceless mode (a device description instead of a
 * GPU) builds execution plans without a device, but the cuDNN engine libraries
 * still load libcuda.so.1 and query it once. This library answers as a machine
 * with a driver and no GPU: every call fails with CUDA_ERROR_NO_DEVICE except
 * the driver version, so nothing can ever run on it.
 */
#include <stddef.h>
#include <string.h>

typedef int CUresult;
enum { CUDA_SUCCESS = 0, CUDA_ERROR_NO_DEVICE = 100 };
enum { FAKE_DRIVER_VERSION = 13000 }; /* CUDA 13.0: what the cu13 cuDNN wheel expects */

static CUresult no_device(void) { return CUDA_ERROR_NO_DEVICE; }

/* Entry points cuDNN's engine libraries look up with dlsym: all fail, so that
 * no kernel can ever be loaded or launched. Exported only so that the lookups
 * succeed quietly. */
#define NO_DEVICE_ENTRY(name) \
    CUresult name(void) { return CUDA_ERROR_NO_DEVICE; }
NO_DEVICE_ENTRY(cuCtxGetCurrent)
NO_DEVICE_ENTRY(cuCtxGetLimit)
NO_DEVICE_ENTRY(cuCtxPopCurrent)
NO_DEVICE_ENTRY(cuCtxPushCurrent)
NO_DEVICE_ENTRY(cuDeviceGet)
NO_DEVICE_ENTRY(cuKernelGetAttribute)
NO_DEVICE_ENTRY(cuKernelSetAttribute)
NO_DEVICE_ENTRY(cuLaunchCooperativeKernel)
NO_DEVICE_ENTRY(cuLaunchKernel)
NO_DEVICE_ENTRY(cuLaunchKernelEx)
NO_DEVICE_ENTRY(cuLibraryGetKernel)
NO_DEVICE_ENTRY(cuLibraryLoadData)
NO_DEVICE_ENTRY(cuLibraryLoadFromFile)
NO_DEVICE_ENTRY(cuLibraryUnload)
NO_DEVICE_ENTRY(cuLinkAddData)
NO_DEVICE_ENTRY(cuLinkComplete)
NO_DEVICE_ENTRY(cuLinkCreate)
NO_DEVICE_ENTRY(cuLinkDestroy)
NO_DEVICE_ENTRY(cuOccupancyMaxPotentialClusterSize)
NO_DEVICE_ENTRY(cuStreamGetCtx)

/* Error texts are looked up to word messages: answer them truthfully. */
CUresult cuGetErrorName(CUresult error, const char **text) {
    if (text == NULL) return 1;
    *text = error == CUDA_ERROR_NO_DEVICE ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_UNKNOWN";
    return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char **text) {
    if (text == NULL) return 1;
    *text = error == CUDA_ERROR_NO_DEVICE ? "no CUDA-capable device (test-only driver stand-in)"
                                          : "unknown error (test-only driver stand-in)";
    return CUDA_SUCCESS;
}

CUresult cuInit(unsigned int flags) {
    (void)flags;
    return CUDA_ERROR_NO_DEVICE;
}

CUresult cuDeviceGetCount(int *count) {
    if (count != NULL) *count = 0;
    return CUDA_ERROR_NO_DEVICE;
}

CUresult cuDriverGetVersion(int *version) {
    if (version == NULL) return 1; /* CUDA_ERROR_INVALID_VALUE */
    *version = FAKE_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

/* The CUDA runtime fetches every other driver entry point through here. */
static void *entry_point(const char *symbol) {
    if (strcmp(symbol, "cuInit") == 0) return (void *)cuInit;
    if (strcmp(symbol, "cuDeviceGetCount") == 0) return (void *)cuDeviceGetCount;
    if (strcmp(symbol, "cuDriverGetVersion") == 0) return (void *)cuDriverGetVersion;
    if (strcmp(symbol, "cuGetErrorName") == 0) return (void *)cuGetErrorName;
    if (strcmp(symbol, "cuGetErrorString") == 0) return (void *)cuGetErrorString;
    return (void *)no_device;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cuda_version,
                          unsigned long long flags) {
    (void)cuda_version;
    (void)flags;
    if (symbol == NULL || pfn == NULL) return 1;
    *pfn = entry_point(symbol);
    return CUDA_SUCCESS;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version,
                             unsigned long long flags, int *symbol_status) {
    if (symbol_status != NULL) *symbol_status = 0; /* CU_GET_PROC_ADDRESS_SUCCESS */
    return cuGetProcAddress(symbol, pfn, cuda_version, flags);
}
