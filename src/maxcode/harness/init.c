/*
 * maxcode-init: the trusted first process of every sandboxed batch of runs.
 *
 *   maxcode-init STATUS_FD MODE TIMEOUT_MS LIMITS N [STDIN STDOUT STDERR AUX DIR PROG FRESH] x N
 *                M [ARGC ARGV...] x M ISOLATE K [KIND PATH] x K
 *
 * LIMITS is "AS:CPU:FSIZE:NPROC:PIN": address space and file size in bytes, CPU seconds,
 * process count, and the CPUs to pin every run to (a list such as 3 or 0,2); -1 leaves one
 * unset. They are applied to
 * each run's process (root ignores a process-count limit: the caller runs this as a uid of
 * the run's own). No process of a run may change a CPU affinity (a seccomp filter: the
 * parent may move a run's threads from outside, the run cannot).
 *
 * ISOLATE 1 gives every run, before its program starts, a state of its own: new user, ipc and
 * mount namespaces (System V and POSIX IPC objects, message queues and mounts die with the run),
 * then the K mount entries, in order: KIND "fresh" mounts an empty writable tmpfs at PATH (a
 * private /tmp, /dev/shm), "hide" an empty read-only one (expected outputs), and "ro" / "rw"
 * bind PATH back where a fresh or hidden mount covered it (the run's folders, the binaries). A
 * run whose FRESH is 1 gets an empty tmpfs at DIR: nothing an earlier run wrote there survives.
 * A run that cannot be isolated does not start (exit 126, fail closed). ISOLATE 0 (rlimits)
 * skips all of this.
 *
 * Each status line carries cpu_us, the CPU time of every process of the run (threads, children
 * and anything left behind, reaped by this init), against wall_ns: the judge compares them,
 * since a CPU pin is a request the program can undo. Both start at one instant, stamped by the
 * run's process just before it runs the program: its CPU time until then (the fork and the
 * run's isolation, kernel time of a few milliseconds) is in neither.
 *
 * M programs follow the runs, each as its argument count and arguments; PROG is the index of the
 * program a run starts. For each of the N runs, one after the other, it starts the program in DIR
 * with the given
 * descriptors as its stdin, stdout, stderr and descriptor 3 (AUX, -1 for none: valgrind's
 * log, which valgrind then hides from the program), every other descriptor closed, times it with
 * CLOCK_MONOTONIC, kills it after TIMEOUT_MS, waits for it, kills whatever it left behind,
 * and writes one status line per run to STATUS_FD. The program never sees STATUS_FD nor the
 * descriptors of the other runs. It cannot tamper with this process: it is not dumpable (no
 * ptrace, no /proc/PID/fd), and as the init of a pid namespace it gets no signal it has no
 * handler for from inside the namespace.
 *
 * MODE says how the run's other processes are found:
 *   ns    this is the init of the run's pid namespace: kill(-1) reaches exactly them, and
 *         succeeds only when there are some;
 *   uid   the run has a uid of its own: they are that uid's processes in /proc (kill(-1)
 *         would report success for any process on the host, even ones it may not signal);
 *   group only the program's process group (weakest: no private uid, no namespace).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

enum mode { MODE_NS, MODE_UID, MODE_GROUP };

static void reap_ready(void) {
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

static void reap_all(void) {
    for (;;) {
        if (waitpid(-1, NULL, 0) > 0) continue;
        if (errno == EINTR) continue;
        break;
    }
}

/* Kill every other process owned by our uid; returns how many there were. */
static int kill_own_uid(void) {
    int found = 0;
    uid_t me = getuid();
    pid_t self = getpid();
    DIR *proc = opendir("/proc");
    if (proc == NULL) return 0;
    struct dirent *entry;
    while ((entry = readdir(proc)) != NULL) {
        char *end;
        long pid = strtol(entry->d_name, &end, 10);
        if (*end != '\0' || pid <= 0 || pid == self) continue;
        struct stat info;
        char path[64];
        snprintf(path, sizeof path, "/proc/%ld", pid);
        if (stat(path, &info) == 0 && info.st_uid == me && kill((pid_t)pid, SIGKILL) == 0) found++;
    }
    closedir(proc);
    return found;
}

static int kill_leftovers(enum mode mode, pid_t group) {
    int found = 0;
    reap_ready(); /* children that already exited are not stragglers */
    if (mode == MODE_NS) found = kill(-1, SIGKILL) == 0;
    if (mode == MODE_UID) found = kill_own_uid() > 0;
    if (mode == MODE_GROUP) found = killpg(group, SIGKILL) == 0;
    if (found) reap_all();
    return found;
}

static void close_descriptors_from(int first) {
    long limit = sysconf(_SC_OPEN_MAX);
    if (limit < 0 || limit > 65536) limit = 65536;
#ifdef SYS_close_range
    if (syscall(SYS_close_range, first, ~0U, 0) == 0) return;
#endif
    for (int fd = first; fd < limit; fd++) close(fd);
}

static void set_limit(int resource, long long soft, long long hard) {
    if (soft < 0) return;
    struct rlimit limit = {(rlim_t)soft, (rlim_t)hard};
    if (setrlimit(resource, &limit) != 0) _exit(126);
}

static long long elapsed_ns(const struct timespec *from, const struct timespec *to) {
    return (long long)(to->tv_sec - from->tv_sec) * 1000000000LL + (to->tv_nsec - from->tv_nsec);
}

#define MAX_MOUNTS 64

struct mount_entry {
    const char *kind; /* fresh, hide, ro, rw */
    const char *path;
};

static int write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t written = write(fd, text, strlen(text));
    close(fd);
    return written == (ssize_t)strlen(text) ? 0 : -1;
}

static int make_dirs(const char *path) {
    char buffer[4096];
    if (strlen(path) >= sizeof buffer) return -1;
    strcpy(buffer, path);
    for (char *slash = buffer + 1; *slash; slash++) {
        if (*slash != '/') continue;
        *slash = '\0';
        if (mkdir(buffer, 0755) != 0 && errno != EEXIST) return -1;
        *slash = '/';
    }
    return mkdir(buffer, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* Remount a bind read-only, keeping the flags a user namespace may not drop (nosuid, nodev,
 * noexec, the atime flags of the mount it came from). */
static int remount_read_only(const char *path) {
    struct statvfs info;
    if (statvfs(path, &info) != 0) return -1;
    unsigned long flags = MS_REMOUNT | MS_BIND | MS_RDONLY;
    if (info.f_flag & ST_NOSUID) flags |= MS_NOSUID;
    if (info.f_flag & ST_NODEV) flags |= MS_NODEV;
    if (info.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
    if (info.f_flag & ST_NOATIME) flags |= MS_NOATIME;
    if (info.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
    if (info.f_flag & ST_RELATIME) flags |= MS_RELATIME;
    return mount(NULL, path, NULL, flags, NULL);
}

static void isolation_failed(const char *what, const char *path) {
    fprintf(stderr, "maxcode-init: cannot isolate the run (%s %s): %s\n", what, path ? path : "",
            strerror(errno));
    _exit(126);
}

/* The seccomp architecture of this build, the bit x32 system calls carry, and the number the
 * 32-bit ABI a 64-bit kernel also serves (i386, arm) gives sched_setaffinity. */
#if defined(__x86_64__)
#define NATIVE_ARCH AUDIT_ARCH_X86_64
#define NATIVE_MASK 0xBFFFFFFFu /* clears __X32_SYSCALL_BIT */
#elif defined(__aarch64__)
#define NATIVE_ARCH AUDIT_ARCH_AARCH64
#define NATIVE_MASK 0xFFFFFFFFu
#else
#error "maxcode-init: no seccomp filter for this architecture"
#endif
#define COMPAT_SETAFFINITY 241

/* In the run's child, before exec: no process of the run may change a thread's CPU affinity
 * (sched_setaffinity fails with EPERM, whatever the ABI), so where it runs is the parent's to
 * choose: the LIMITS pin now, or the parent from outside later. no_new_privs comes with it. */
static void fix_cpus(void) {
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_ARCH, 0, 5),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_STMT(BPF_ALU | BPF_AND | BPF_K, NATIVE_MASK),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_sched_setaffinity, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        /* another ABI */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, COMPAT_SETAFFINITY, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog program = {.len = sizeof code / sizeof code[0], .filter = code};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program, 0, 0) != 0)
        isolation_failed("seccomp", "sched_setaffinity");
}

/* In the run's child, before exec: new user, ipc and mount namespaces; then the mounts. */
static void isolate_run(const struct mount_entry *entries, int count, const char *dir, int fresh) {
    uid_t uid = getuid();
    gid_t gid = getgid();
    /* The init is not dumpable, which would leave this child's /proc files to root: the run's
     * process becomes dumpable at exec anyway, and must write its own uid map now. */
    prctl(PR_SET_DUMPABLE, 1);
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC) != 0) isolation_failed("unshare", NULL);
    char map[64];
    write_file("/proc/self/setgroups", "deny");
    snprintf(map, sizeof map, "%u %u 1\n", (unsigned)uid, (unsigned)uid);
    if (write_file("/proc/self/uid_map", map) != 0) isolation_failed("uid_map", NULL);
    snprintf(map, sizeof map, "%u %u 1\n", (unsigned)gid, (unsigned)gid);
    if (write_file("/proc/self/gid_map", map) != 0) isolation_failed("gid_map", NULL);
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) isolation_failed("private", "/");
    /* Opened in the new namespace (a bind's source must be one of its mounts), before the
     * covers below hide them. */
    int kept[MAX_MOUNTS];
    for (int k = 0; k < count; k++) {
        kept[k] = -1;
        if (strcmp(entries[k].kind, "ro") == 0 || strcmp(entries[k].kind, "rw") == 0) {
            kept[k] = open(entries[k].path, O_PATH | O_CLOEXEC);
        }
    }
    /* Covers first (writable, so that the binds below can make their mount points), then the
     * binds, then the hidden covers turn read-only. */
    for (int k = 0; k < count; k++) {
        const char *kind = entries[k].kind, *path = entries[k].path;
        struct stat info;
        if (strcmp(kind, "fresh") != 0 && strcmp(kind, "hide") != 0) continue;
        if (stat(path, &info) != 0 || !S_ISDIR(info.st_mode)) continue;
        if (mount("maxcode", path, "tmpfs", MS_NOSUID | MS_NODEV, "size=256m,mode=1777") != 0)
            isolation_failed(kind, path);
    }
    for (int k = 0; k < count; k++) {
        const char *kind = entries[k].kind, *path = entries[k].path;
        struct stat info;
        if (kept[k] < 0) continue; /* not a bind, or nothing there to restore */
        char source[64];
        snprintf(source, sizeof source, "/proc/self/fd/%d", kept[k]);
        if (stat(path, &info) != 0 && make_dirs(path) != 0) isolation_failed("mkdir", path);
        if (mount(source, path, NULL, MS_BIND | MS_REC, NULL) != 0) isolation_failed("bind", path);
        if (strcmp(kind, "ro") == 0 && remount_read_only(path) != 0)
            isolation_failed("read-only", path);
        close(kept[k]);
    }
    for (int k = 0; k < count; k++) {
        struct stat info;
        if (strcmp(entries[k].kind, "hide") != 0) continue;
        if (stat(entries[k].path, &info) != 0 || !S_ISDIR(info.st_mode)) continue;
        if (remount_read_only(entries[k].path) != 0) isolation_failed("read-only", entries[k].path);
    }
    if (fresh && mount("maxcode", dir, "tmpfs", MS_NOSUID | MS_NODEV, "size=1g,mode=0700") != 0)
        isolation_failed("fresh", dir);
}

/* The CPUs of LIMITS' PIN field ("-1": none, else numbers separated by commas) into *set,
 * *any set when there is one; -1 for a malformed list. */
static int parse_cpus(const char *text, cpu_set_t *set, int *any) {
    if (strcmp(text, "-1") == 0) return 0;
    const char *at = text;
    while (*at) {
        char *end;
        long cpu = strtol(at, &end, 10);
        if (end == at || cpu < 0 || cpu >= CPU_SETSIZE) return -1;
        CPU_SET((int)cpu, set);
        *any = 1;
        if (*end == ',') end++;
        else if (*end != '\0') return -1;
        at = end;
    }
    return *any ? 0 : -1;
}

static long long children_cpu_us(void) {
    struct rusage usage;
    memset(&usage, 0, sizeof usage);
    getrusage(RUSAGE_CHILDREN, &usage);
    return (long long)(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000000LL +
           usage.ru_utime.tv_usec + usage.ru_stime.tv_usec;
}

int main(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: maxcode-init STATUS_FD ns|uid|group TIMEOUT_MS LIMITS N "
                        "[STDIN STDOUT STDERR AUX DIR PROG FRESH]... M [ARGC ARGV...]... "
                        "ISOLATE K [KIND PATH]...\n");
        return 125;
    }
    int status_fd = atoi(argv[1]);
    enum mode mode = strcmp(argv[2], "ns") == 0 ? MODE_NS
                     : strcmp(argv[2], "uid") == 0 ? MODE_UID
                                                   : MODE_GROUP;
    long timeout_ms = atol(argv[3]);
    long long limit_as = -1, limit_cpu = -1, limit_fsize = -1, limit_nproc = -1;
    char pins[1024];
    cpu_set_t pinned;
    int pin = 0;
    CPU_ZERO(&pinned);
    if (sscanf(argv[4], "%lld:%lld:%lld:%lld:%1023s", &limit_as, &limit_cpu, &limit_fsize,
               &limit_nproc, pins) != 5 ||
        parse_cpus(pins, &pinned, &pin) != 0) {
        fprintf(stderr, "maxcode-init: bad limits %s\n", argv[4]);
        return 125;
    }
    int runs = atoi(argv[5]);
    int first = 6; /* the first run's STDIN */
    const int fields = 7;
    int at = first + fields * runs;
    int programs = at < argc ? atoi(argv[at++]) : 0;
    if (runs < 1 || programs < 1 || programs > 64) {
        fprintf(stderr, "maxcode-init: bad arguments\n");
        return 125;
    }
    char **program_argv[64];
    for (int p = 0; p < programs; p++) {
        int count = at < argc ? atoi(argv[at++]) : 0;
        if (count < 1 || at + count > argc) {
            fprintf(stderr, "maxcode-init: bad program %d\n", p);
            return 125;
        }
        program_argv[p] = calloc((size_t)count + 1, sizeof(char *));
        if (program_argv[p] == NULL) return 125;
        for (int k = 0; k < count; k++) program_argv[p][k] = argv[at + k];
        at += count;
    }
    int isolate = at < argc ? atoi(argv[at++]) : 0;
    int mounts = at < argc ? atoi(argv[at++]) : 0;
    if (mounts < 0 || mounts > MAX_MOUNTS || at + 2 * mounts > argc) {
        fprintf(stderr, "maxcode-init: bad mount entries\n");
        return 125;
    }
    struct mount_entry entries[MAX_MOUNTS];
    for (int k = 0; k < mounts; k++) {
        entries[k].kind = argv[at++];
        entries[k].path = argv[at++];
    }
    if (pin) sched_setaffinity(0, sizeof pinned, &pinned);
    prctl(PR_SET_DUMPABLE, 0);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    fcntl(status_fd, F_SETFD, FD_CLOEXEC);
    for (int run = 0; run < runs; run++) {
        for (int k = 0; k < 4; k++) {
            int fd = atoi(argv[first + fields * run + k]);
            if (fd >= 0) fcntl(fd, F_SETFD, FD_CLOEXEC);
        }
    }

    int last_status = 0;
    for (int run = 0; run < runs; run++) {
        const int base = first + fields * run;
        int in = atoi(argv[base]), out = atoi(argv[base + 1]);
        int err = atoi(argv[base + 2]), aux = atoi(argv[base + 3]);
        const char *dir = argv[base + 4];
        int chosen = atoi(argv[base + 5]);
        int fresh = atoi(argv[base + 6]);
        if (chosen < 0 || chosen >= programs) {
            dprintf(status_fd, "run=%d error=program\n", run);
            return 125;
        }
        char **command = program_argv[chosen];
        struct timespec started, ended;
        long long cpu_before = children_cpu_us();
        /* The child says on this pipe when its namespaces and mounts are ready: the clock
         * starts there, so the run's own isolation is not part of the program's time. */
        int ready[2];
        if (pipe2(ready, O_CLOEXEC) != 0) {
            dprintf(status_fd, "run=%d error=pipe errno=%d\n", run, errno);
            return 125;
        }
        clock_gettime(CLOCK_MONOTONIC, &started);
        pid_t child = fork();
        if (child < 0) {
            dprintf(status_fd, "run=%d error=fork errno=%d\n", run, errno);
            return 125;
        }
        if (child == 0) {
            close(ready[0]);
            if (mode == MODE_GROUP) setpgid(0, 0);
            if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) _exit(126);
            if (isolate) isolate_run(entries, mounts, dir, fresh);
            if (chdir(dir) != 0) _exit(126);
            if (aux >= 0 && (aux == 3 ? fcntl(3, F_SETFD, 0) : dup2(aux, 3)) < 0) _exit(126);
            set_limit(RLIMIT_CORE, 0, 0);
            set_limit(RLIMIT_AS, limit_as, limit_as);
            set_limit(RLIMIT_FSIZE, limit_fsize, limit_fsize);
            set_limit(RLIMIT_CPU, limit_cpu, limit_cpu < 0 ? -1 : limit_cpu + 1);
            set_limit(RLIMIT_NPROC, limit_nproc, limit_nproc);
            fix_cpus();
            setenv("HOME", dir, 1);
            setenv("TMPDIR", dir, 1);
            /* The instant both clocks start: this process's CPU time so far, then the time. */
            struct timespec cpu_now, now;
            clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu_now);
            clock_gettime(CLOCK_MONOTONIC, &now);
            long long stamp[3] = {(long long)cpu_now.tv_sec * 1000000000LL + cpu_now.tv_nsec,
                                  (long long)now.tv_sec, (long long)now.tv_nsec};
            if (write(ready[1], stamp, sizeof stamp) != (ssize_t)sizeof stamp) _exit(126);
            close_descriptors_from(aux >= 0 ? 4 : 3);
            execvp(command[0], command);
            fprintf(stderr, "maxcode-init: cannot run %s: %s\n", command[0], strerror(errno));
            _exit(127);
        }
        if (mode == MODE_GROUP) setpgid(child, child);
        close(ready[1]);
        long long stamp[3];
        ssize_t got;
        while ((got = read(ready[0], stamp, sizeof stamp)) < 0 && errno == EINTR) {
        }
        close(ready[0]);
        long long setup_us = 0;
        if (got == (ssize_t)sizeof stamp) {
            setup_us = stamp[0] / 1000;
            started.tv_sec = (time_t)stamp[1];
            started.tv_nsec = (long)stamp[2];
        } else {
            clock_gettime(CLOCK_MONOTONIC, &started); /* it failed before the program ran */
        }

        int timed_out = 0;
        int pidfd = (int)syscall(SYS_pidfd_open, child, 0);
        if (pidfd >= 0) {
            struct pollfd ready = {.fd = pidfd, .events = POLLIN};
            int waited;
            do {
                struct timespec now;
                clock_gettime(CLOCK_MONOTONIC, &now);
                long left = timeout_ms - elapsed_ns(&started, &now) / 1000000LL;
                waited = left > 0 ? poll(&ready, 1, (int)left) : 0;
            } while (waited < 0 && errno == EINTR);
            if (waited == 0) timed_out = 1;
            close(pidfd);
        } else {
            /* No pidfd (old kernel): poll for the exit in small steps. */
            for (;;) {
                siginfo_t info;
                memset(&info, 0, sizeof info);
                if (waitid(P_PID, child, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid) break;
                struct timespec now, pause = {0, 200000};
                clock_gettime(CLOCK_MONOTONIC, &now);
                if (elapsed_ns(&started, &now) / 1000000LL >= timeout_ms) {
                    timed_out = 1;
                    break;
                }
                nanosleep(&pause, NULL);
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &ended);
        if (timed_out) kill(child, SIGKILL);
        int status = 0;
        struct rusage usage;
        memset(&usage, 0, sizeof usage);
        while (wait4(child, &status, 0, &usage) < 0) {
            if (errno != EINTR) break;
        }
        int stragglers = kill_leftovers(mode, child);
        reap_ready();
        /* Every process of the run was a child of this init or reparented to it (it is the
         * subreaper) and has been reaped: their CPU time is all in RUSAGE_CHILDREN. */
        long long cpu_us = children_cpu_us() - cpu_before - setup_us;
        if (cpu_us < 0) cpu_us = 0;
        dprintf(status_fd,
                "run=%d status=%d wall_ns=%lld cpu_us=%lld maxrss_kb=%ld stragglers=%d "
                "timed_out=%d\n",
                run, status, elapsed_ns(&started, &ended), cpu_us, usage.ru_maxrss, stragglers,
                timed_out);
        last_status = status;
        /* The first timeout decides: a program that hangs would cost each later run its whole
         * limit, and no later run can change the verdict (they are left unreported). */
        if (timed_out) break;
    }
    if (WIFEXITED(last_status)) return WEXITSTATUS(last_status);
    return 128 + WTERMSIG(last_status);
}
