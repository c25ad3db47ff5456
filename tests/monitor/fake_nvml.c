/* A stand-in for the NVIDIA driver's libnvidia-ml.so.1, for machines without a GPU: the entry
 * points strato's NVML loader uses, with values a test controls through a file named by
 * FAKE_NVML_STATE, read on every call: "GPUS UTIL MEMUTIL [ERROR [HANDLE_ERROR]]" (default
 * "2 50 10"); a non-zero ERROR is what every device query returns then (15: NVML_ERROR_GPU_IS_LOST,
 * a GPU off the bus), a non-zero HANDLE_ERROR what nvmlDeviceGetHandleByIndex_v2 returns for GPU 0
 * (100 + the error: for every GPU). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    unsigned int gpu, memory;
} Util;
typedef struct {
    unsigned long long total, free, used;
} Mem;

static int state_errors(unsigned int* gpus, unsigned int* util, unsigned int* mem, int* handle_err) {
    int err = 0;
    *gpus = 2, *util = 50, *mem = 10, *handle_err = 0;
    const char* path = getenv("FAKE_NVML_STATE");
    if (!path) return 0;
    FILE* f = fopen(path, "r");
    if (!f) return 0;
    const int n = fscanf(f, "%u %u %u %d %d", gpus, util, mem, &err, handle_err);
    if (n < 3) *gpus = 2, *util = 50, *mem = 10;
    if (n < 4) err = 0;
    if (n < 5) *handle_err = 0;
    fclose(f);
    return err;
}
static int state_error(unsigned int* gpus, unsigned int* util, unsigned int* mem) {
    int handle_err;
    return state_errors(gpus, util, mem, &handle_err);
}
static void state(unsigned int* gpus, unsigned int* util, unsigned int* mem) { (void)state_error(gpus, util, mem); }
static int device_error(void) {
    unsigned int g, u, m;
    return state_error(&g, &u, &m);
}

int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
const char* nvmlErrorString(int r) { return r == 15 ? "GPU is lost" : r ? "Unknown Error" : "Success"; }
int nvmlDeviceGetCount_v2(unsigned int* n) {
    unsigned int u, m;
    state(n, &u, &m);
    return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void** h) {
    unsigned int g, u, m;
    int handle_err;
    (void)state_errors(&g, &u, &m, &handle_err);
    if (handle_err > 100) return handle_err - 100;
    if (handle_err && i == 0) return handle_err;
    *h = (void*)(size_t)(i + 1);
    return 0;
}
int nvmlDeviceGetName(void* h, char* buf, unsigned int len) {
    (void)h;
    snprintf(buf, len, "Fake H200");
    return 0;
}
int nvmlDeviceGetUUID(void* h, char* buf, unsigned int len) {
    snprintf(buf, len, "GPU-fake-%zu", (size_t)h);
    return 0;
}
int nvmlDeviceGetUtilizationRates(void* h, Util* u) {
    unsigned int g, util, mem;
    (void)h;
    const int err = state_error(&g, &util, &mem);
    if (err) return err;
    u->gpu = util;
    u->memory = mem;
    return 0;
}
int nvmlDeviceGetMemoryInfo(void* h, Mem* m) {
    (void)h;
    const int err = device_error();
    if (err) return err;
    m->total = 144384ull << 20;
    m->used = 1024ull << 20;
    m->free = m->total - m->used;
    return 0;
}
int nvmlDeviceGetPowerUsage(void* h, unsigned int* mw) {
    (void)h;
    const int err = device_error();
    if (err) return err;
    *mw = 123456;
    return 0;
}
int nvmlDeviceGetTemperature(void* h, int sensor, unsigned int* t) {
    (void)h;
    const int err = device_error();
    if (err) return err;
    (void)sensor;
    *t = 41;
    return 0;
}
int nvmlDeviceGetClockInfo(void* h, int type, unsigned int* mhz) {
    (void)h;
    const int err = device_error();
    if (err) return err;
    *mhz = type == 1 ? 1980 : 2619;
    return 0;
}
int nvmlSystemGetDriverVersion(char* buf, unsigned int len) {
    snprintf(buf, len, "999.99-fake");
    return 0;
}
