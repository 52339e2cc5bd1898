/*
 * maxcode-init: the trusted first process of every sandboxed run.
 *
 *   maxcode-init STATUS_FD ns|uid|group -- PROGRAM ARGS...
 *
 * It starts PROGRAM, times it with CLOCK_MONOTONIC, waits for it, then kills whatever the
 * program left behind and writes one status line to STATUS_FD, a descriptor the program never
 * sees (close-on-exec). The program cannot tamper with it: this process is not dumpable (no
 * ptrace, no /proc/PID/fd), and as the init of a pid namespace it receives no signal it has
 * no handler for, from inside the namespace.
 *
 * "ns": this is the init of the run's pid namespace; kill(-1) reaches exactly the run's other
 *       processes and succeeds only if there are some.
 * "uid": the run has a uid of its own; its processes are found in /proc by owner (kill(-1)
 *        would report success for any process on the host, even ones it may not signal).
 * "group": only the program's process group is killed (weakest level, no private uid).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void reap_ready(void) {
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

static void reap_all(void) {
    while (waitpid(-1, NULL, 0) > 0 || errno == EINTR) {
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

int main(int argc, char **argv) {
    if (argc < 5 || strcmp(argv[3], "--") != 0) {
        fprintf(stderr, "usage: maxcode-init STATUS_FD ns|uid|group -- PROGRAM ARGS...\n");
        return 125;
    }
    int status_fd = atoi(argv[1]);
    int namespace_init = strcmp(argv[2], "ns") == 0;
    int own_group = strcmp(argv[2], "group") == 0;
    prctl(PR_SET_DUMPABLE, 0);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    fcntl(status_fd, F_SETFD, FD_CLOEXEC);

    struct timespec started, ended;
    clock_gettime(CLOCK_MONOTONIC, &started);
    pid_t child = fork();
    if (child < 0) {
        dprintf(status_fd, "error=fork errno=%d\n", errno);
        return 125;
    }
    if (child == 0) {
        if (own_group) setpgid(0, 0);
        execvp(argv[4], argv + 4);
        fprintf(stderr, "maxcode-init: cannot run %s: %s\n", argv[4], strerror(errno));
        _exit(127);
    }
    if (own_group) setpgid(child, child);
    int status = 0;
    struct rusage usage;
    memset(&usage, 0, sizeof usage);
    while (wait4(child, &status, 0, &usage) < 0) {
        if (errno != EINTR) break;
    }
    clock_gettime(CLOCK_MONOTONIC, &ended);

    /* Children that already exited are not stragglers: reap them before looking. */
    reap_ready();
    int stragglers = 0;
    if (namespace_init) stragglers = kill(-1, SIGKILL) == 0;
    if (own_group) stragglers = killpg(child, SIGKILL) == 0;
    if (!namespace_init && !own_group) stragglers = kill_own_uid() > 0;
    if (stragglers) reap_all();

    long long wall_ns = (long long)(ended.tv_sec - started.tv_sec) * 1000000000LL +
                        (ended.tv_nsec - started.tv_nsec);
    long long cpu_us = (long long)(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000000LL +
                       usage.ru_utime.tv_usec + usage.ru_stime.tv_usec;
    dprintf(status_fd, "status=%d wall_ns=%lld cpu_us=%lld maxrss_kb=%ld stragglers=%d\n", status,
            wall_ns, cpu_us, usage.ru_maxrss, stragglers);
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
}
