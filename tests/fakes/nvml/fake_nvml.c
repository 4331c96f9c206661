/*
 * A fake libnvidia-ml.so.1 for tests, compiled against NVIDIA's nvml.h (PyPI nvidia-nvml-dev) so
 * that nvidia-ml-py's real ctypes code runs against it.
 *
 * Scripted by the file named in $XIDPIPE_FAKE_NVML_CONFIG, re-read whenever it changes (replace it
 * with a rename, so that it is never read half-written), one
 * directive per line (`#` starts a comment; underscores in `name=` stand for spaces):
 *
 *   driver 550.54.15
 *   cuda 12040
 *   gpu uuid=GPU-... serial=1650 name=NVIDIA_H100 bus=00000000:3B:00.0 vbios=96.00.89.00.01
 *       inforom=G520.0200.00.05 numa=0 mig=1 power=700000 enforced=690000 tshut=92 tslow=89
 *       ecc_sbe=3 ecc_dbe=0 remap=0,1,0,0 nvlinks=4 lost=0 minor=0 unsupported=numa,nvlink,remap,ecc,minor
 *   mig gpu=0 uuid=MIG-... gi=1 ci=0
 *   proc gpu=0 pid=1234 mem=1048576 gi=4294967295 ci=4294967295
 *   event id=1 gpu=0 type=8 data=79 gi=4294967295 ci=4294967295
 *   hang func=nvmlDeviceGetPowerManagementLimit ms=30000
 *   supported_events 0xC10B
 *
 * Events are delivered once each, in id order, to event sets whose GPU registered for the type;
 * events already in the file when a GPU is registered are not delivered (as NVML documents).
 * A GPU with lost=1 answers NVML_ERROR_GPU_IS_LOST, and an event set watching it reports that once.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "nvml.h"

#define MAX_GPUS 16
#define MAX_MIG 8
#define MAX_PROCS 64
#define MAX_EVENTS 256
#define MAX_HANGS 16
#define MAX_SETS 16

struct nvmlDevice_st {
    int gpu;      /* index into gpus[] */
    int mig;      /* -1 for the GPU itself, else index into gpus[gpu].migs[] */
};

typedef struct {
    char uuid[96];
    unsigned int gi, ci;
} fake_mig_t;

typedef struct {
    char uuid[96], serial[64], name[96], bus[32], vbios[64], inforom[64], unsupported[256];
    int numa, mig_mode, lost, nvlinks, minor;
    unsigned int power, enforced, tshut, tslow;
    unsigned long long ecc_sbe, ecc_dbe;
    unsigned int remap[4];
    int n_mig;
    fake_mig_t migs[MAX_MIG];
    struct nvmlDevice_st handle;
    struct nvmlDevice_st mig_handles[MAX_MIG];
} fake_gpu_t;

typedef struct {
    int gpu;
    unsigned int pid, gi, ci;
    unsigned long long mem;
} fake_proc_t;

typedef struct {
    long id;
    int gpu;
    unsigned long long type, data;
    unsigned int gi, ci;
} fake_event_t;

typedef struct {
    char func[96];
    long ms;
} fake_hang_t;

struct nvmlEventSet_st {
    int used;
    unsigned long long mask[MAX_GPUS];
    long last_id;
    int lost_reported[MAX_GPUS];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char driver[64] = "550.54.15";
static int cuda = 12040;
static unsigned long long supported_events =
    nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError | nvmlEventTypeXidCriticalError |
    nvmlEventMigConfigChange | nvmlEventTypeGpuUnavailableError | nvmlEventTypeGpuRecoveryAction;
static fake_gpu_t gpus[MAX_GPUS];
static int n_gpus;
static fake_proc_t procs[MAX_PROCS];
static int n_procs;
static fake_event_t events[MAX_EVENTS];
static int n_events;
static fake_hang_t hangs[MAX_HANGS];
static int n_hangs;
static struct nvmlEventSet_st sets[MAX_SETS];
static struct timespec loaded_mtime;
static off_t loaded_size = -1;
static ino_t loaded_ino;
static int initialised;

static const char *kv(const char *line, const char *key, char *out, size_t n) {
    char pat[64];
    snprintf(pat, sizeof pat, " %s=", key);
    const char *p = strstr(line, pat);
    if (!p) return NULL;
    p += strlen(pat);
    size_t i = 0;
    while (*p && *p != ' ' && *p != '\n' && i + 1 < n) {
        out[i++] = (*p == '_' && strcmp(key, "name") == 0) ? ' ' : *p;
        p++;
    }
    out[i] = 0;
    return out;
}

static unsigned long long kvu(const char *line, const char *key, unsigned long long dflt) {
    char buf[64];
    return kv(line, key, buf, sizeof buf) ? strtoull(buf, NULL, 0) : dflt;
}

static void parse(FILE *f) {
    char line[1024], buf[256];
    n_gpus = n_procs = n_events = n_hangs = 0;
    while (fgets(line, sizeof line, f)) {
        char word[32] = {0};
        char padded[1100];
        if (line[0] == '#' || sscanf(line, "%31s", word) != 1) continue;
        snprintf(padded, sizeof padded, " %s", line + strlen(word));
        if (!strcmp(word, "driver")) {
            sscanf(line + 6, "%63s", driver);
        } else if (!strcmp(word, "cuda")) {
            cuda = atoi(line + 4);
        } else if (!strcmp(word, "supported_events")) {
            supported_events = strtoull(line + 16, NULL, 0);
        } else if (!strcmp(word, "gpu") && n_gpus < MAX_GPUS) {
            fake_gpu_t *g = &gpus[n_gpus];
            memset(g, 0, sizeof *g);
            if (!kv(padded, "uuid", g->uuid, sizeof g->uuid)) snprintf(g->uuid, sizeof g->uuid, "GPU-fake-%d", n_gpus);
            if (!kv(padded, "serial", g->serial, sizeof g->serial)) strcpy(g->serial, "0000000000000");
            if (!kv(padded, "name", g->name, sizeof g->name)) strcpy(g->name, "NVIDIA H100 80GB HBM3");
            if (!kv(padded, "bus", g->bus, sizeof g->bus)) snprintf(g->bus, sizeof g->bus, "00000000:%02X:00.0", 0x10 + n_gpus);
            if (!kv(padded, "vbios", g->vbios, sizeof g->vbios)) strcpy(g->vbios, "96.00.89.00.01");
            if (!kv(padded, "inforom", g->inforom, sizeof g->inforom)) strcpy(g->inforom, "G520.0200.00.05");
            kv(padded, "unsupported", g->unsupported, sizeof g->unsupported);
            g->numa = (int)kvu(padded, "numa", 0);
            g->minor = (int)kvu(padded, "minor", (unsigned long long)n_gpus);
            g->mig_mode = (int)kvu(padded, "mig", 0);
            g->lost = (int)kvu(padded, "lost", 0);
            g->nvlinks = (int)kvu(padded, "nvlinks", 0);
            g->power = (unsigned)kvu(padded, "power", 700000);
            g->enforced = (unsigned)kvu(padded, "enforced", g->power);
            g->tshut = (unsigned)kvu(padded, "tshut", 92);
            g->tslow = (unsigned)kvu(padded, "tslow", 89);
            g->ecc_sbe = kvu(padded, "ecc_sbe", 0);
            g->ecc_dbe = kvu(padded, "ecc_dbe", 0);
            if (kv(padded, "remap", buf, sizeof buf))
                sscanf(buf, "%u,%u,%u,%u", &g->remap[0], &g->remap[1], &g->remap[2], &g->remap[3]);
            g->handle.gpu = n_gpus;
            g->handle.mig = -1;
            n_gpus++;
        } else if (!strcmp(word, "mig")) {
            int gi = (int)kvu(padded, "gpu", 0);
            if (gi < n_gpus && gpus[gi].n_mig < MAX_MIG) {
                fake_gpu_t *g = &gpus[gi];
                fake_mig_t *m = &g->migs[g->n_mig];
                kv(padded, "uuid", m->uuid, sizeof m->uuid);
                m->gi = (unsigned)kvu(padded, "gi", 0);
                m->ci = (unsigned)kvu(padded, "ci", 0);
                g->mig_handles[g->n_mig].gpu = gi;
                g->mig_handles[g->n_mig].mig = g->n_mig;
                g->n_mig++;
            }
        } else if (!strcmp(word, "proc") && n_procs < MAX_PROCS) {
            fake_proc_t *p = &procs[n_procs++];
            p->gpu = (int)kvu(padded, "gpu", 0);
            p->pid = (unsigned)kvu(padded, "pid", 1);
            p->mem = kvu(padded, "mem", 0);
            p->gi = (unsigned)kvu(padded, "gi", 0xFFFFFFFFu);
            p->ci = (unsigned)kvu(padded, "ci", 0xFFFFFFFFu);
        } else if (!strcmp(word, "event") && n_events < MAX_EVENTS) {
            fake_event_t *e = &events[n_events++];
            e->id = (long)kvu(padded, "id", (unsigned long long)n_events);
            e->gpu = (int)kvu(padded, "gpu", 0);
            e->type = kvu(padded, "type", nvmlEventTypeXidCriticalError);
            e->data = kvu(padded, "data", 0);
            e->gi = (unsigned)kvu(padded, "gi", 0xFFFFFFFFu);
            e->ci = (unsigned)kvu(padded, "ci", 0xFFFFFFFFu);
        } else if (!strcmp(word, "hang") && n_hangs < MAX_HANGS) {
            kv(padded, "func", hangs[n_hangs].func, sizeof hangs[n_hangs].func);
            hangs[n_hangs].ms = (long)kvu(padded, "ms", 60000);
            n_hangs++;
        }
    }
}

/* Re-read the script when it changed. Called with the lock held. */
static void reload(void) {
    const char *path = getenv("XIDPIPE_FAKE_NVML_CONFIG");
    struct stat st;
    if (!path || stat(path, &st) != 0) return;
    if (st.st_ino == loaded_ino && st.st_size == loaded_size && st.st_mtim.tv_sec == loaded_mtime.tv_sec &&
        st.st_mtim.tv_nsec == loaded_mtime.tv_nsec)
        return;
    FILE *f = fopen(path, "r");
    if (!f) return;
    parse(f);
    fclose(f);
    loaded_size = st.st_size;
    loaded_mtime = st.st_mtim;
    loaded_ino = st.st_ino;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

/* Every entry point: reload the script, then hang if told to. */
static void enter(const char *func) {
    long ms = 0;
    pthread_mutex_lock(&lock);
    reload();
    for (int i = 0; i < n_hangs; i++)
        if (!strcmp(hangs[i].func, func)) ms = hangs[i].ms;
    pthread_mutex_unlock(&lock);
    if (ms > 0) sleep_ms(ms);
}

static int unsupported(const fake_gpu_t *g, const char *what) {
    char pat[64];
    char list[260];
    snprintf(pat, sizeof pat, ",%s,", what);
    snprintf(list, sizeof list, ",%s,", g->unsupported);
    return strstr(list, pat) != NULL;
}

/* Resolve a handle to its GPU; NULL with *ret set when it cannot be used. */
static fake_gpu_t *gpu_of(nvmlDevice_t d, nvmlReturn_t *ret) {
    if (!initialised) { *ret = NVML_ERROR_UNINITIALIZED; return NULL; }
    if (!d || d->gpu < 0 || d->gpu >= n_gpus) { *ret = NVML_ERROR_INVALID_ARGUMENT; return NULL; }
    if (gpus[d->gpu].lost) { *ret = NVML_ERROR_GPU_IS_LOST; return NULL; }
    *ret = NVML_SUCCESS;
    return &gpus[d->gpu];
}

#define DEVICE_CALL(fn, d)                     \
    nvmlReturn_t ret;                          \
    enter(fn);                                 \
    pthread_mutex_lock(&lock);                 \
    fake_gpu_t *g = gpu_of((d), &ret);         \
    if (!g) { pthread_mutex_unlock(&lock); return ret; }

#define DONE(r) do { pthread_mutex_unlock(&lock); return (r); } while (0)

static nvmlReturn_t copy_str(const char *src, char *dst, unsigned int len) {
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(dst, src);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    enter("nvmlInitWithFlags");
    pthread_mutex_lock(&lock);
    initialised = 1;
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&lock);
    initialised = 0;
    DONE(NVML_SUCCESS);
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    enter("nvmlSystemGetDriverVersion");
    pthread_mutex_lock(&lock);
    DONE(copy_str(driver, version, length));
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    enter("nvmlSystemGetNVMLVersion");
    pthread_mutex_lock(&lock);
    char v[80];
    snprintf(v, sizeof v, "13.%s", driver);
    DONE(copy_str(v, version, length));
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) {
    enter("nvmlSystemGetCudaDriverVersion");
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    *v = cuda;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return nvmlSystemGetCudaDriverVersion(v); }

nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) {
    enter("nvmlDeviceGetCount_v2");
    pthread_mutex_lock(&lock);
    if (!initialised) DONE(NVML_ERROR_UNINITIALIZED);
    *count = (unsigned)n_gpus;
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    enter("nvmlDeviceGetHandleByIndex_v2");
    pthread_mutex_lock(&lock);
    if (!initialised) DONE(NVML_ERROR_UNINITIALIZED);
    if (index >= (unsigned)n_gpus) DONE(NVML_ERROR_INVALID_ARGUMENT);
    if (gpus[index].lost) DONE(NVML_ERROR_GPU_IS_LOST);
    *device = &gpus[index].handle;
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    enter("nvmlDeviceGetHandleByUUID");
    pthread_mutex_lock(&lock);
    for (int i = 0; i < n_gpus; i++)
        if (!strcmp(gpus[i].uuid, uuid)) {
            if (gpus[i].lost) DONE(NVML_ERROR_GPU_IS_LOST);
            *device = &gpus[i].handle;
            DONE(NVML_SUCCESS);
        }
    DONE(NVML_ERROR_NOT_FOUND);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *index) {
    DEVICE_CALL("nvmlDeviceGetIndex", d);
    *index = (unsigned)d->gpu;
    (void)g;
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length) {
    DEVICE_CALL("nvmlDeviceGetUUID", d);
    DONE(copy_str(d->mig >= 0 ? g->migs[d->mig].uuid : g->uuid, uuid, length));
}

nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t d, char *serial, unsigned int length) {
    DEVICE_CALL("nvmlDeviceGetSerial", d);
    if (unsupported(g, "serial")) DONE(NVML_ERROR_NOT_SUPPORTED);
    DONE(copy_str(g->serial, serial, length));
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length) {
    DEVICE_CALL("nvmlDeviceGetName", d);
    DONE(copy_str(g->name, name, length));
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci) {
    DEVICE_CALL("nvmlDeviceGetPciInfo_v3", d);
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busId, sizeof pci->busId, "%s", g->bus);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%s", g->bus + (strlen(g->bus) > 12 ? 4 : 0));
    unsigned int dom = 0, bus = 0, dev = 0;
    sscanf(g->bus, "%x:%x:%x", &dom, &bus, &dev);
    pci->domain = dom;
    pci->bus = bus;
    pci->device = dev;
    pci->pciDeviceId = 0x233010DE;
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t d, char *version, unsigned int length) {
    DEVICE_CALL("nvmlDeviceGetVbiosVersion", d);
    DONE(copy_str(g->vbios, version, length));
}

nvmlReturn_t nvmlDeviceGetInforomVersion(nvmlDevice_t d, nvmlInforomObject_t object, char *version,
                                         unsigned int length) {
    DEVICE_CALL("nvmlDeviceGetInforomVersion", d);
    if (unsupported(g, "inforom") || object != NVML_INFOROM_OEM) DONE(NVML_ERROR_NOT_SUPPORTED);
    DONE(copy_str(g->inforom, version, length));
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *current, unsigned int *pending) {
    DEVICE_CALL("nvmlDeviceGetMigMode", d);
    if (unsupported(g, "mig")) DONE(NVML_ERROR_NOT_SUPPORTED);
    *current = *pending = (unsigned)g->mig_mode;
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int *count) {
    DEVICE_CALL("nvmlDeviceGetMaxMigDeviceCount", d);
    if (unsupported(g, "mig")) DONE(NVML_ERROR_NOT_SUPPORTED);
    *count = 7;
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int index, nvmlDevice_t *mig) {
    DEVICE_CALL("nvmlDeviceGetMigDeviceHandleByIndex", d);
    if (!g->mig_mode) DONE(NVML_ERROR_INVALID_ARGUMENT);
    if (index >= (unsigned)g->n_mig) DONE(NVML_ERROR_NOT_FOUND);
    *mig = &g->mig_handles[index];
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned int *is_mig) {
    DEVICE_CALL("nvmlDeviceIsMigDeviceHandle", d);
    (void)g;
    *is_mig = d->mig >= 0;
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t d, nvmlDevice_t *parent) {
    DEVICE_CALL("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", d);
    *parent = &g->handle;
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned int *id) {
    DEVICE_CALL("nvmlDeviceGetGpuInstanceId", d);
    if (d->mig < 0) DONE(NVML_ERROR_NOT_SUPPORTED);
    *id = g->migs[d->mig].gi;
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t d, unsigned int *id) {
    DEVICE_CALL("nvmlDeviceGetComputeInstanceId", d);
    if (d->mig < 0) DONE(NVML_ERROR_NOT_SUPPORTED);
    *id = g->migs[d->mig].ci;
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *minor) {
    DEVICE_CALL("nvmlDeviceGetMinorNumber", d);
    if (unsupported(g, "minor")) DONE(NVML_ERROR_NOT_SUPPORTED);
    *minor = (unsigned)g->minor;
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t d, unsigned int *node) {
    DEVICE_CALL("nvmlDeviceGetNumaNodeId", d);
    if (unsupported(g, "numa")) DONE(NVML_ERROR_NOT_SUPPORTED);
    *node = (unsigned)g->numa;
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int link, nvmlEnableState_t *active) {
    DEVICE_CALL("nvmlDeviceGetNvLinkState", d);
    if (unsupported(g, "nvlink")) DONE(NVML_ERROR_NOT_SUPPORTED);
    if (link >= NVML_NVLINK_MAX_LINKS) DONE(NVML_ERROR_INVALID_ARGUMENT);
    if ((int)link >= g->nvlinks + 2) DONE(NVML_ERROR_NOT_SUPPORTED); /* links past the last one */
    *active = (int)link < g->nvlinks ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, nvmlMemoryErrorType_t type, nvmlEccCounterType_t counter,
                                         unsigned long long *count) {
    DEVICE_CALL("nvmlDeviceGetTotalEccErrors", d);
    if (unsupported(g, "ecc")) DONE(NVML_ERROR_NOT_SUPPORTED);
    (void)counter;
    *count = type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED ? g->ecc_dbe : g->ecc_sbe;
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned int *corr, unsigned int *unc, unsigned int *pending,
                                       unsigned int *failure) {
    DEVICE_CALL("nvmlDeviceGetRemappedRows", d);
    if (unsupported(g, "remap")) DONE(NVML_ERROR_NOT_SUPPORTED);
    *corr = g->remap[0];
    *unc = g->remap[1];
    *pending = g->remap[2];
    *failure = g->remap[3];
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t d, unsigned int *limit) {
    DEVICE_CALL("nvmlDeviceGetPowerManagementLimit", d);
    *limit = g->power;
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *limit) {
    DEVICE_CALL("nvmlDeviceGetEnforcedPowerLimit", d);
    *limit = g->enforced;
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t d, nvmlTemperatureThresholds_t t, unsigned int *temp) {
    DEVICE_CALL("nvmlDeviceGetTemperatureThreshold", d);
    if (t == NVML_TEMPERATURE_THRESHOLD_SHUTDOWN) *temp = g->tshut;
    else if (t == NVML_TEMPERATURE_THRESHOLD_SLOWDOWN) *temp = g->tslow;
    else DONE(NVML_ERROR_NOT_SUPPORTED);
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *infos) {
    DEVICE_CALL("nvmlDeviceGetComputeRunningProcesses_v3", d);
    unsigned int n = 0;
    for (int i = 0; i < n_procs; i++)
        if (procs[i].gpu == d->gpu) n++;
    if (!infos || *count < n) {
        *count = n;
        DONE(n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS);
    }
    unsigned int k = 0;
    for (int i = 0; i < n_procs; i++) {
        if (procs[i].gpu != d->gpu) continue;
        infos[k].pid = procs[i].pid;
        infos[k].usedGpuMemory = procs[i].mem;
        infos[k].gpuInstanceId = procs[i].gi;
        infos[k].computeInstanceId = procs[i].ci;
        k++;
    }
    *count = k;
    (void)g;
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types) {
    DEVICE_CALL("nvmlDeviceGetSupportedEventTypes", d);
    (void)g;
    *types = supported_events;
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    enter("nvmlEventSetCreate");
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_SETS; i++)
        if (!sets[i].used) {
            memset(&sets[i], 0, sizeof sets[i]);
            sets[i].used = 1;
            *set = &sets[i];
            DONE(NVML_SUCCESS);
        }
    DONE(NVML_ERROR_MEMORY);
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set) {
    DEVICE_CALL("nvmlDeviceRegisterEvents", d);
    (void)g;
    if (d->mig >= 0) DONE(NVML_ERROR_NOT_SUPPORTED); /* register with the parent GPU */
    if (types & ~supported_events) DONE(NVML_ERROR_NOT_SUPPORTED);
    set->mask[d->gpu] |= types;
    for (int i = 0; i < n_events; i++) /* events before registration are not recorded */
        if (events[i].id > set->last_id) set->last_id = events[i].id;
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        enter("nvmlEventSetWait_v2");
        pthread_mutex_lock(&lock);
        if (!initialised) DONE(NVML_ERROR_UNINITIALIZED);
        for (int gi = 0; gi < n_gpus; gi++)
            if (set->mask[gi] && gpus[gi].lost && !set->lost_reported[gi]) {
                set->lost_reported[gi] = 1;
                DONE(NVML_ERROR_GPU_IS_LOST);
            }
        const fake_event_t *best = NULL;
        for (int i = 0; i < n_events; i++) {
            const fake_event_t *e = &events[i];
            if (e->id <= set->last_id || e->gpu >= n_gpus) continue;
            if (!(set->mask[e->gpu] & e->type)) continue;
            if (!best || e->id < best->id) best = e;
        }
        if (best) {
            set->last_id = best->id;
            data->device = &gpus[best->gpu].handle;
            data->eventType = best->type;
            data->eventData = best->data;
            data->gpuInstanceId = best->gi;
            data->computeInstanceId = best->ci;
            DONE(NVML_SUCCESS);
        }
        pthread_mutex_unlock(&lock);
        clock_gettime(CLOCK_MONOTONIC, &now);
        long waited = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
        if (waited >= (long)timeoutms) return NVML_ERROR_TIMEOUT;
        sleep_ms(waited + 20 > (long)timeoutms ? (long)timeoutms - waited : 20);
    }
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    pthread_mutex_lock(&lock);
    set->used = 0;
    DONE(NVML_SUCCESS);
}
