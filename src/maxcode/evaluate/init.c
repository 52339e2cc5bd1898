/*
 * maxcode-init: the trusted first process of every sandboxed batch of runs.
 *
 *   maxcode-init STATUS_FD MODE TIMEOUT_MS LIMITS N [STDIN STDOUT STDERR AUX DIR PROG] x N
 *                M [ARGC ARGV...] x M
 *
 * LIMITS is "AS:CPU:FSIZE:NPROC:PIN": address space and file size in bytes, CPU seconds,
 * process count, and the CPU to pin every run to; -1 leaves one unset. They are applied to
 * each run's process (root ignores a process-count limit: the caller runs this as a uid of
 * the run's own).
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
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
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

int main(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: maxcode-init STATUS_FD ns|uid|group TIMEOUT_MS LIMITS N "
                        "[STDIN STDOUT STDERR AUX DIR PROG]... M [ARGC ARGV...]...\n");
        return 125;
    }
    int status_fd = atoi(argv[1]);
    enum mode mode = strcmp(argv[2], "ns") == 0 ? MODE_NS
                     : strcmp(argv[2], "uid") == 0 ? MODE_UID
                                                   : MODE_GROUP;
    long timeout_ms = atol(argv[3]);
    long long limit_as = -1, limit_cpu = -1, limit_fsize = -1, limit_nproc = -1, pin = -1;
    if (sscanf(argv[4], "%lld:%lld:%lld:%lld:%lld", &limit_as, &limit_cpu, &limit_fsize,
               &limit_nproc, &pin) != 5) {
        fprintf(stderr, "maxcode-init: bad limits %s\n", argv[4]);
        return 125;
    }
    int runs = atoi(argv[5]);
    int first = 6; /* the first run's STDIN */
    int at = first + 6 * runs;
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
    if (pin >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET((int)pin, &set);
        sched_setaffinity(0, sizeof set, &set);
    }
    prctl(PR_SET_DUMPABLE, 0);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    fcntl(status_fd, F_SETFD, FD_CLOEXEC);
    for (int run = 0; run < runs; run++) {
        for (int k = 0; k < 4; k++) {
            int fd = atoi(argv[first + 6 * run + k]);
            if (fd >= 0) fcntl(fd, F_SETFD, FD_CLOEXEC);
        }
    }

    int last_status = 0;
    for (int run = 0; run < runs; run++) {
        const int base = first + 6 * run;
        int in = atoi(argv[base]), out = atoi(argv[base + 1]);
        int err = atoi(argv[base + 2]), aux = atoi(argv[base + 3]);
        const char *dir = argv[base + 4];
        int chosen = atoi(argv[base + 5]);
        if (chosen < 0 || chosen >= programs) {
            dprintf(status_fd, "run=%d error=program\n", run);
            return 125;
        }
        char **command = program_argv[chosen];
        struct timespec started, ended;
        clock_gettime(CLOCK_MONOTONIC, &started);
        pid_t child = fork();
        if (child < 0) {
            dprintf(status_fd, "run=%d error=fork errno=%d\n", run, errno);
            return 125;
        }
        if (child == 0) {
            if (mode == MODE_GROUP) setpgid(0, 0);
            if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0 || chdir(dir) != 0) _exit(126);
            if (aux >= 0 && (aux == 3 ? fcntl(3, F_SETFD, 0) : dup2(aux, 3)) < 0) _exit(126);
            set_limit(RLIMIT_CORE, 0, 0);
            set_limit(RLIMIT_AS, limit_as, limit_as);
            set_limit(RLIMIT_FSIZE, limit_fsize, limit_fsize);
            set_limit(RLIMIT_CPU, limit_cpu, limit_cpu < 0 ? -1 : limit_cpu + 1);
            set_limit(RLIMIT_NPROC, limit_nproc, limit_nproc);
            setenv("HOME", dir, 1);
            setenv("TMPDIR", dir, 1);
            close_descriptors_from(aux >= 0 ? 4 : 3);
            execvp(command[0], command);
            fprintf(stderr, "maxcode-init: cannot run %s: %s\n", command[0], strerror(errno));
            _exit(127);
        }
        if (mode == MODE_GROUP) setpgid(child, child);

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
        long long cpu_us = (long long)(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000000LL +
                           usage.ru_utime.tv_usec + usage.ru_stime.tv_usec;
        dprintf(status_fd,
                "run=%d status=%d wall_ns=%lld cpu_us=%lld maxrss_kb=%ld stragglers=%d "
                "timed_out=%d\n",
                run, status, elapsed_ns(&started, &ended), cpu_us, usage.ru_maxrss, stragglers,
                timed_out);
        last_status = status;
    }
    if (WIFEXITED(last_status)) return WEXITSTATUS(last_status);
    return 128 + WTERMSIG(last_status);
}
