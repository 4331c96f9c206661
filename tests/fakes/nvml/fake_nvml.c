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
 *   init_error 9                      (nvmlInit fails: 9 driver not loaded, 18 library/driver mismatch)
 *
 * Health readings per GPU (a GPU answers NVML_ERROR_NOT_SUPPORTED for a feature it lacks: a reading
 * it is not given, or one named in `unsupported=`, as a PCIe card without NVLink or fabric does):
 *
 *   gpu ... recovery=0 retired_sbe=0 retired_dbe=0 retired_pending=0 ecc_sbe_vol=0 ecc_dbe_vol=0
 *       nvlink_down=2,5 nvlink_replay=0 nvlink_recovery=0 nvlink_crc_flit=0 nvlink_crc_data=0
 *       pcie_replay=0 pcie_gen=5 pcie_gen_max=5 pcie_width=16 pcie_width_max=16 reasons=0x0
 *       temp=45 margin=40 power_draw=350000 fabric_state=3 fabric_status=0 fabric_health=1
 *
 * Over time: `at SECONDS gpu=I key=value ...` sets those readings of GPU I once the fake's clock reaches
 * SECONDS, in file order; `event ... at=SECONDS` is delivered only from then on. The clock is the number
 * in the file named by $XIDPIPE_FAKE_NVML_CLOCK (a test's simulated time), else the seconds since the
 * script was first read. A clock that goes back replays the script from its start.
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
#define MAX_TIMELINE 256
#define MAX_LINKS 18

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
    unsigned long long ecc_sbe, ecc_dbe, ecc_sbe_vol, ecc_dbe_vol;
    unsigned int remap[4];
    /* health readings; has_* says the GPU was given the reading (else it is not supported) */
    unsigned int recovery, retired_sbe, retired_dbe, retired_pending;
    unsigned int nvlink_down[MAX_LINKS];
    unsigned long long nvlink_err[4]; /* replay, recovery, crc flit, crc data (NVML_NVLINK_ERROR_DL_*) */
    unsigned int pcie_replay, pcie_gen, pcie_gen_max, pcie_width, pcie_width_max, power_draw;
    unsigned long long reasons;
    int temp, margin, has_margin;
    unsigned int fabric_state, fabric_status, fabric_health;
    int has_sbe_vol, has_dbe_vol; /* without them the volatile counters are the aggregate ones */
    int has_recovery, has_retired, has_pcie, has_reasons, has_temp, has_power_draw, has_fabric;
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
    double at; /* visible from this time on */
} fake_event_t;

typedef struct {
    double at;
    int gpu;
    int applied;
    char line[1100];
} fake_step_t;

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
static fake_step_t timeline[MAX_TIMELINE];
static int n_timeline;
static int init_error;
static double last_now = -1;
static struct timespec first_load;
static int first_loaded;
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

static int has(const char *line, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, " %s=", key);
    return strstr(line, pat) != NULL;
}

/* The health readings a `gpu` or `at` line sets on a GPU; keys it does not name keep their value. */
static void apply_health(fake_gpu_t *g, const char *padded) {
    char buf[256];
#define SETU(field, key) if (has(padded, key)) g->field = (unsigned)kvu(padded, key, 0)
    if (has(padded, "recovery")) { g->recovery = (unsigned)kvu(padded, "recovery", 0); g->has_recovery = 1; }
    if (has(padded, "retired_sbe") || has(padded, "retired_dbe") || has(padded, "retired_pending")) g->has_retired = 1;
    SETU(retired_sbe, "retired_sbe");
    SETU(retired_dbe, "retired_dbe");
    SETU(retired_pending, "retired_pending");
    if (has(padded, "ecc_sbe")) g->ecc_sbe = kvu(padded, "ecc_sbe", 0);
    if (has(padded, "ecc_dbe")) g->ecc_dbe = kvu(padded, "ecc_dbe", 0);
    if (has(padded, "ecc_sbe_vol")) { g->ecc_sbe_vol = kvu(padded, "ecc_sbe_vol", 0); g->has_sbe_vol = 1; }
    if (has(padded, "ecc_dbe_vol")) { g->ecc_dbe_vol = kvu(padded, "ecc_dbe_vol", 0); g->has_dbe_vol = 1; }
    if (kv(padded, "remap", buf, sizeof buf))
        sscanf(buf, "%u,%u,%u,%u", &g->remap[0], &g->remap[1], &g->remap[2], &g->remap[3]);
    if (kv(padded, "nvlink_down", buf, sizeof buf)) {
        memset(g->nvlink_down, 0, sizeof g->nvlink_down);
        for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
            int link = atoi(tok);
            if (link >= 0 && link < MAX_LINKS) g->nvlink_down[link] = 1;
        }
    }
    if (has(padded, "nvlink_replay")) g->nvlink_err[NVML_NVLINK_ERROR_DL_REPLAY] = kvu(padded, "nvlink_replay", 0);
    if (has(padded, "nvlink_recovery"))
        g->nvlink_err[NVML_NVLINK_ERROR_DL_RECOVERY] = kvu(padded, "nvlink_recovery", 0);
    if (has(padded, "nvlink_crc_flit"))
        g->nvlink_err[NVML_NVLINK_ERROR_DL_CRC_FLIT] = kvu(padded, "nvlink_crc_flit", 0);
    if (has(padded, "nvlink_crc_data"))
        g->nvlink_err[NVML_NVLINK_ERROR_DL_CRC_DATA] = kvu(padded, "nvlink_crc_data", 0);
    if (has(padded, "pcie_replay") || has(padded, "pcie_gen") || has(padded, "pcie_width")) g->has_pcie = 1;
    SETU(pcie_replay, "pcie_replay");
    SETU(pcie_gen, "pcie_gen");
    SETU(pcie_gen_max, "pcie_gen_max");
    SETU(pcie_width, "pcie_width");
    SETU(pcie_width_max, "pcie_width_max");
    if (has(padded, "reasons")) { g->reasons = kvu(padded, "reasons", 0); g->has_reasons = 1; }
    if (has(padded, "temp")) { g->temp = (int)kvu(padded, "temp", 0); g->has_temp = 1; }
    if (has(padded, "margin")) { g->margin = (int)strtol(kv(padded, "margin", buf, sizeof buf), NULL, 0);
                                 g->has_margin = 1; }
    if (has(padded, "power_draw")) { g->power_draw = (unsigned)kvu(padded, "power_draw", 0); g->has_power_draw = 1; }
    if (has(padded, "fabric_state")) g->has_fabric = 1;
    SETU(fabric_state, "fabric_state");
    SETU(fabric_status, "fabric_status");
    SETU(fabric_health, "fabric_health");
    if (has(padded, "lost")) g->lost = (int)kvu(padded, "lost", 0);
    if (has(padded, "nvlinks")) g->nvlinks = (int)kvu(padded, "nvlinks", 0);
    if (has(padded, "unsupported")) kv(padded, "unsupported", g->unsupported, sizeof g->unsupported);
#undef SETU
}

static void parse(FILE *f) {
    char line[1024], buf[256];
    n_gpus = n_procs = n_events = n_hangs = n_timeline = 0;
    init_error = 0;
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
        } else if (!strcmp(word, "init_error")) {
            init_error = atoi(line + 10);
        } else if (!strcmp(word, "at") && n_timeline < MAX_TIMELINE) {
            fake_step_t *st = &timeline[n_timeline++];
            st->at = strtod(line + 2, NULL);
            st->gpu = (int)kvu(padded, "gpu", 0);
            st->applied = 0;
            snprintf(st->line, sizeof st->line, "%s", padded);
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
            g->pcie_gen = g->pcie_gen_max = 5;
            g->pcie_width = g->pcie_width_max = 16;
            apply_health(g, padded);
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
            e->at = kv(padded, "at", buf, sizeof buf) ? strtod(buf, NULL) : 0.0;
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
    if (!first_loaded) {
        clock_gettime(CLOCK_MONOTONIC, &first_load);
        first_loaded = 1;
    }
    loaded_size = st.st_size;
    loaded_mtime = st.st_mtim;
    loaded_ino = st.st_ino;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

/* The fake's clock: the test's simulated time, else the seconds since the script was first read. */
static double fake_now(void) {
    const char *path = getenv("XIDPIPE_FAKE_NVML_CLOCK");
    if (path) {
        char buf[64] = {0};
        FILE *f = fopen(path, "r");
        if (f) {
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            fclose(f);
            buf[n] = 0;
            return strtod(buf, NULL);
        }
        return 0.0;
    }
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - first_load.tv_sec) + (now.tv_nsec - first_load.tv_nsec) / 1e9;
}

/* Apply the timeline's steps that are due. Called with the lock held, after reload(). */
static void advance(void) {
    double now = fake_now();
    if (now < last_now) { /* the clock went back: start the script over */
        loaded_size = -1;
        reload();
    }
    last_now = now;
    for (int i = 0; i < n_timeline; i++)
        if (!timeline[i].applied && timeline[i].at <= now) {
            timeline[i].applied = 1;
            if (timeline[i].gpu >= 0 && timeline[i].gpu < n_gpus) apply_health(&gpus[timeline[i].gpu], timeline[i].line);
        }
}

/* Every entry point: reload the script and apply its due steps, then hang if told to. */
static void enter(const char *func) {
    long ms = 0;
    pthread_mutex_lock(&lock);
    reload();
    advance();
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
    if (init_error) DONE((nvmlReturn_t)init_error);
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
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
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
    *active = (int)link < g->nvlinks && !(link < MAX_LINKS && g->nvlink_down[link]) ? NVML_FEATURE_ENABLED
                                                                                   : NVML_FEATURE_DISABLED;
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, nvmlMemoryErrorType_t type, nvmlEccCounterType_t counter,
                                         unsigned long long *count) {
    DEVICE_CALL("nvmlDeviceGetTotalEccErrors", d);
    if (unsupported(g, "ecc")) DONE(NVML_ERROR_NOT_SUPPORTED);
    int dbe = type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED;
    if (counter == NVML_VOLATILE_ECC)
        *count = dbe ? (g->has_dbe_vol ? g->ecc_dbe_vol : g->ecc_dbe) : (g->has_sbe_vol ? g->ecc_sbe_vol : g->ecc_sbe);
    else
        *count = dbe ? g->ecc_dbe : g->ecc_sbe;
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

/* --- health readings ------------------------------------------------------------------------ */

static nvmlReturn_t field_value(const fake_gpu_t *g, unsigned int id, unsigned long long *v) {
    switch (id) {
    case NVML_FI_DEV_GET_GPU_RECOVERY_ACTION:
        if (!g->has_recovery || unsupported(g, "recovery")) return NVML_ERROR_NOT_SUPPORTED;
        *v = g->recovery;
        return NVML_SUCCESS;
    case NVML_FI_DEV_ECC_SBE_VOL_TOTAL: case NVML_FI_DEV_ECC_DBE_VOL_TOTAL:
    case NVML_FI_DEV_ECC_SBE_AGG_TOTAL: case NVML_FI_DEV_ECC_DBE_AGG_TOTAL:
        if (unsupported(g, "ecc")) return NVML_ERROR_NOT_SUPPORTED;
        *v = id == NVML_FI_DEV_ECC_SBE_VOL_TOTAL ? (g->has_sbe_vol ? g->ecc_sbe_vol : g->ecc_sbe)
           : id == NVML_FI_DEV_ECC_DBE_VOL_TOTAL ? (g->has_dbe_vol ? g->ecc_dbe_vol : g->ecc_dbe)
           : id == NVML_FI_DEV_ECC_SBE_AGG_TOTAL ? g->ecc_sbe : g->ecc_dbe;
        return NVML_SUCCESS;
    case NVML_FI_DEV_RETIRED_SBE: case NVML_FI_DEV_RETIRED_DBE: case NVML_FI_DEV_RETIRED_PENDING:
        if (!g->has_retired || unsupported(g, "retired")) return NVML_ERROR_NOT_SUPPORTED;
        *v = id == NVML_FI_DEV_RETIRED_SBE ? g->retired_sbe : id == NVML_FI_DEV_RETIRED_DBE ? g->retired_dbe
           : g->retired_pending;
        return NVML_SUCCESS;
    case NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL: case NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL:
    case NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL: case NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL:
        if (!g->nvlinks || unsupported(g, "nvlink")) return NVML_ERROR_NOT_SUPPORTED;
        *v = g->nvlink_err[id == NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL ? NVML_NVLINK_ERROR_DL_REPLAY
                           : id == NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL ? NVML_NVLINK_ERROR_DL_RECOVERY
                           : id == NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL ? NVML_NVLINK_ERROR_DL_CRC_FLIT
                           : NVML_NVLINK_ERROR_DL_CRC_DATA];
        return NVML_SUCCESS;
    case NVML_FI_DEV_PCIE_REPLAY_COUNTER:
        if (!g->has_pcie || unsupported(g, "pcie")) return NVML_ERROR_NOT_SUPPORTED;
        *v = g->pcie_replay;
        return NVML_SUCCESS;
    case NVML_FI_DEV_REMAPPED_COR: case NVML_FI_DEV_REMAPPED_UNC:
    case NVML_FI_DEV_REMAPPED_PENDING: case NVML_FI_DEV_REMAPPED_FAILURE:
        if (unsupported(g, "remap")) return NVML_ERROR_NOT_SUPPORTED;
        *v = g->remap[id - NVML_FI_DEV_REMAPPED_COR];
        return NVML_SUCCESS;
    default:
        return NVML_ERROR_NOT_SUPPORTED;
    }
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t d, int count, nvmlFieldValue_t *values) {
    DEVICE_CALL("nvmlDeviceGetFieldValues", d);
    if (count < 0 || !values) DONE(NVML_ERROR_INVALID_ARGUMENT);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    for (int i = 0; i < count; i++) {
        unsigned long long v = 0;
        values[i].timestamp = (long long)now.tv_sec * 1000000 + now.tv_nsec / 1000;
        values[i].latencyUsec = 0;
        values[i].nvmlReturn = field_value(g, values[i].fieldId, &v);
        values[i].valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
        values[i].value.ullVal = v;
    }
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t d, nvmlPageRetirementCause_t cause, unsigned int *count,
                                       unsigned long long *addresses) {
    DEVICE_CALL("nvmlDeviceGetRetiredPages", d);
    if (!g->has_retired || unsupported(g, "retired")) DONE(NVML_ERROR_NOT_SUPPORTED);
    unsigned int n = cause == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR ? g->retired_dbe : g->retired_sbe;
    if (!addresses || *count < n) {
        *count = n;
        DONE(n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS);
    }
    for (unsigned int i = 0; i < n; i++) addresses[i] = 0x1000ULL * (i + 1) + (cause << 24);
    *count = n;
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t d, nvmlEnableState_t *pending) {
    DEVICE_CALL("nvmlDeviceGetRetiredPagesPendingStatus", d);
    if (!g->has_retired || unsupported(g, "retired")) DONE(NVML_ERROR_NOT_SUPPORTED);
    *pending = g->retired_pending ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t d, unsigned int link, nvmlNvLinkErrorCounter_t counter,
                                             unsigned long long *value) {
    DEVICE_CALL("nvmlDeviceGetNvLinkErrorCounter", d);
    if (unsupported(g, "nvlink") || !g->nvlinks) DONE(NVML_ERROR_NOT_SUPPORTED);
    if (link >= (unsigned)g->nvlinks || (unsigned)counter > NVML_NVLINK_ERROR_DL_CRC_DATA)
        DONE(NVML_ERROR_INVALID_ARGUMENT);
    /* the GPU's errors are all on its first link that is down, else on link 0 */
    unsigned int on = 0;
    for (unsigned int l = 0; l < (unsigned)g->nvlinks && l < MAX_LINKS; l++)
        if (g->nvlink_down[l]) { on = l; break; }
    *value = link == on ? g->nvlink_err[counter] : 0;
    DONE(NVML_SUCCESS);
}

#define PCIE_CALL(fn, field)                                              \
    nvmlReturn_t fn(nvmlDevice_t d, unsigned int *value) {               \
        DEVICE_CALL(#fn, d);                                              \
        if (!value) DONE(NVML_ERROR_INVALID_ARGUMENT);                    \
        if (!g->has_pcie || unsupported(g, "pcie")) DONE(NVML_ERROR_NOT_SUPPORTED); \
        *value = g->field;                                                \
        DONE(NVML_SUCCESS);                                               \
    }

PCIE_CALL(nvmlDeviceGetPcieReplayCounter, pcie_replay)
PCIE_CALL(nvmlDeviceGetCurrPcieLinkGeneration, pcie_gen)
PCIE_CALL(nvmlDeviceGetMaxPcieLinkGeneration, pcie_gen_max)
PCIE_CALL(nvmlDeviceGetCurrPcieLinkWidth, pcie_width)
PCIE_CALL(nvmlDeviceGetMaxPcieLinkWidth, pcie_width_max)

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *reasons) {
    DEVICE_CALL("nvmlDeviceGetCurrentClocksEventReasons", d);
    if (!g->has_reasons || unsupported(g, "reasons")) DONE(NVML_ERROR_NOT_SUPPORTED);
    *reasons = g->reasons;
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t d, nvmlTemperature_t *t) {
    DEVICE_CALL("nvmlDeviceGetTemperatureV", d);
    if (!t) DONE(NVML_ERROR_INVALID_ARGUMENT);
    if (t->version != nvmlTemperature_v1) DONE(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    if (!g->has_temp || unsupported(g, "temp") || t->sensorType != NVML_TEMPERATURE_GPU) DONE(NVML_ERROR_NOT_SUPPORTED);
    t->temperature = g->temp;
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMarginTemperature(nvmlDevice_t d, nvmlMarginTemperature_t *m) {
    DEVICE_CALL("nvmlDeviceGetMarginTemperature", d);
    if (!m) DONE(NVML_ERROR_INVALID_ARGUMENT);
    if (m->version != nvmlMarginTemperature_v1) DONE(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    if (!g->has_temp || unsupported(g, "margin")) DONE(NVML_ERROR_NOT_SUPPORTED);
    m->marginTemperature = g->has_margin ? g->margin : (int)g->tslow - g->temp;
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *power) {
    DEVICE_CALL("nvmlDeviceGetPowerUsage", d);
    if (!g->has_power_draw || unsupported(g, "power_draw")) DONE(NVML_ERROR_NOT_SUPPORTED);
    *power = g->power_draw;
    DONE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t d, nvmlGpuFabricInfoV_t *info) {
    DEVICE_CALL("nvmlDeviceGetGpuFabricInfoV", d);
    if (!info) DONE(NVML_ERROR_INVALID_ARGUMENT);
    if (info->version != nvmlGpuFabricInfo_v3 && info->version != nvmlGpuFabricInfo_v2)
        DONE(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    if (!g->has_fabric || unsupported(g, "fabric")) DONE(NVML_ERROR_NOT_SUPPORTED);
    memset(info->clusterUuid, 0xab, sizeof info->clusterUuid);
    info->status = (nvmlReturn_t)g->fabric_status;
    info->cliqueId = 1;
    info->state = (nvmlGpuFabricState_t)g->fabric_state;
    info->healthMask = 0;
    if (info->version == nvmlGpuFabricInfo_v3) info->healthSummary = (unsigned char)g->fabric_health;
    DONE(NVML_SUCCESS);
}
