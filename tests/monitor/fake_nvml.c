/* A stand-in for the NVIDIA driver's libnvidia-ml.so.1, for machines without a GPU: the entry
 * points strato's NVML loader uses, with values a test controls through a file named by
 * FAKE_NVML_STATE, read on every call: "GPUS UTIL MEMUTIL" (default "2 50 10"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    unsigned int gpu, memory;
} Util;
typedef struct {
    unsigned long long total, free, used;
} Mem;

static void state(unsigned int* gpus, unsigned int* util, unsigned int* mem) {
    *gpus = 2, *util = 50, *mem = 10;
    const char* path = getenv("FAKE_NVML_STATE");
    if (!path) return;
    FILE* f = fopen(path, "r");
    if (!f) return;
    if (fscanf(f, "%u %u %u", gpus, util, mem) != 3) *gpus = 2, *util = 50, *mem = 10;
    fclose(f);
}

int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
const char* nvmlErrorString(int r) { return r ? "Unknown Error" : "Success"; }
int nvmlDeviceGetCount_v2(unsigned int* n) {
    unsigned int u, m;
    state(n, &u, &m);
    return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void** h) {
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
    state(&g, &util, &mem);
    u->gpu = util;
    u->memory = mem;
    return 0;
}
int nvmlDeviceGetMemoryInfo(void* h, Mem* m) {
    (void)h;
    m->total = 144384ull << 20;
    m->used = 1024ull << 20;
    m->free = m->total - m->used;
    return 0;
}
int nvmlDeviceGetPowerUsage(void* h, unsigned int* mw) {
    (void)h;
    *mw = 123456;
    return 0;
}
int nvmlDeviceGetTemperature(void* h, int sensor, unsigned int* t) {
    (void)h;
    (void)sensor;
    *t = 41;
    return 0;
}
int nvmlDeviceGetClockInfo(void* h, int type, unsigned int* mhz) {
    (void)h;
    *mhz = type == 1 ? 1980 : 2619;
    return 0;
}
int nvmlSystemGetDriverVersion(char* buf, unsigned int len) {
    snprintf(buf, len, "999.99-fake");
    return 0;
}
