/*
 * spawn_clone: what the pilotfish core's spawn saves over glibc's posix_spawn, in C.
 *
 * Two spawner threads and a reaper thread (as in the agent), 64 children in flight, each child
 * /bin/true with a cwd, stdin from /dev/null and stdout/stderr to files reused round-robin.
 * Three ways, interleaved round by round:
 *   0  posix_spawn with the attributes the core used (own group, empty mask, every signal
 *      back to its default) and file actions (chdir, three opens with O_TRUNC)
 *   1  clone(CLONE_VM | CLONE_VFORK) on a stack the thread reuses; the child resets only the
 *      signals that are not at SIG_DFL here, then the same steps (what the core does now)
 *   2  as 1, output files opened without O_TRUNC (the core's reused, already empty spool files)
 * Prints per round the rate and the CPU per process of this process (spawners + reaper) and
 * of the children, then the means.
 *
 * Build: make spawn_clone        Run: ./spawn_clone [N per round] [rounds] [dir]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define MODES 3
#define STACK_BYTES (64 * 1024)

static int mode;
static long n_total, per_thread;
static sem_t slots;
static const char *dir;
static char *const child_argv[] = {"/bin/true", NULL};
static posix_spawnattr_t attr;
static int handled[65], n_handled;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu(int who)
{
    struct rusage r;
    getrusage(who, &r);
    return r.ru_utime.tv_sec + r.ru_stime.tv_sec + 1e-6 * (r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

struct child {
    const char *out, *err;
    int trunc;
    volatile int err_no;
};

static int onto(int target, const char *path, int flags)
{
    int fd = open(path, flags, 0644);
    if (fd < 0)
        return -1;
    if (fd != target) {
        if (dup2(fd, target) < 0)
            return -1;
        close(fd);
    }
    return 0;
}

static int child_main(void *p)
{
    struct child *c = p;
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int i = 0; i < n_handled; i++)
        sigaction(handled[i], &dfl, NULL);
    int flags = O_WRONLY | O_CREAT | (c->trunc ? O_TRUNC : 0);
    if (setpgid(0, 0) < 0 || chdir(dir) < 0 || onto(0, "/dev/null", O_RDONLY) < 0 ||
        onto(1, c->out, flags) < 0 || onto(2, c->err, flags) < 0)
        goto fail;
    unsigned long none = 0;
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, 8);
    execve(child_argv[0], child_argv, environ);
fail:
    c->err_no = errno ? errno : EIO;
    _exit(127);
}

static void spawn_one(char *stack, int tid, long i)
{
    char out[4096], err[4096];
    snprintf(out, sizeof out, "%s/%d.%ld.out", dir, tid, i % 128);
    snprintf(err, sizeof err, "%s/%d.%ld.err", dir, tid, i % 128);
    if (mode == 0) {
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addchdir_np(&fa, dir);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        pid_t pid;
        int rc = posix_spawn(&pid, child_argv[0], &fa, &attr, child_argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        if (rc) {
            fprintf(stderr, "posix_spawn: %s\n", strerror(rc));
            exit(1);
        }
        return;
    }
    struct child c = {out, err, mode == 1, 0};
    unsigned long all = ~0UL, old;
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, &old, 8);
    int pid = clone(child_main, stack + STACK_BYTES, CLONE_VM | CLONE_VFORK | SIGCHLD, &c);
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &old, NULL, 8);
    if (pid < 0 || c.err_no) {
        fprintf(stderr, "clone: %s\n", strerror(pid < 0 ? errno : c.err_no));
        exit(1);
    }
}

static void *spawner(void *arg)
{
    int tid = (int)(long)arg;
    char *stack = mmap(NULL, STACK_BYTES, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    for (long i = 0; i < per_thread; i++) {
        sem_wait(&slots);
        spawn_one(stack, tid, i);
    }
    munmap(stack, STACK_BYTES);
    return NULL;
}

static void *reaper(void *arg)
{
    (void)arg;
    long n = 0;
    int status;
    while (n < n_total) {
        if (wait4(-1, &status, 0, NULL) > 0) {
            n++;
            sem_post(&slots);
        } else if (errno == ECHILD) {
            usleep(50); /* nothing spawned yet */
        } else if (errno != EINTR) {
            perror("wait4");
            exit(1);
        }
    }
    return NULL;
}

static void on_signal(int sig)
{
    (void)sig;
}

int main(int argc, char **argv)
{
    n_total = argc > 1 ? atol(argv[1]) : 4000;
    int rounds = argc > 2 ? atoi(argv[2]) : 6;
    dir = argc > 3 ? argv[3] : "/tmp/pilotfish_spawn_clone";
    mkdir(dir, 0700);
    n_total -= n_total % 2;
    per_thread = n_total / 2;
    /* as in the agent: Python ignores SIGPIPE and handles a few signals */
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGUSR1, on_signal);
    for (int s = 1; s < 65; s++) {
        struct sigaction o;
        if (s != SIGKILL && s != SIGSTOP && sigaction(s, NULL, &o) == 0 && o.sa_handler != SIG_DFL)
            handled[n_handled++] = s;
    }
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_init(&attr);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                        POSIX_SPAWN_SETSIGDEF);
    double rate[MODES] = {0}, self_us[MODES] = {0}, kids_us[MODES] = {0};
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < MODES; k++) {
            mode = r % 2 ? MODES - 1 - k : k; /* ABC CBA: drift cancels */
            sem_init(&slots, 0, 64);
            double s0 = cpu(RUSAGE_SELF), c0 = cpu(RUSAGE_CHILDREN), t0 = now();
            pthread_t th[2], rp;
            pthread_create(&rp, NULL, reaper, NULL);
            for (long t = 0; t < 2; t++)
                pthread_create(&th[t], NULL, spawner, (void *)t);
            for (int t = 0; t < 2; t++)
                pthread_join(th[t], NULL);
            pthread_join(rp, NULL);
            double dt = now() - t0;
            double ds = 1e6 * (cpu(RUSAGE_SELF) - s0) / n_total;
            double dc = 1e6 * (cpu(RUSAGE_CHILDREN) - c0) / n_total;
            rate[mode] += n_total / dt / rounds;
            self_us[mode] += ds / rounds;
            kids_us[mode] += dc / rounds;
            printf("round %d way %d: %.0f/s, spawner %.1f us, child %.1f us per process\n", r, mode,
                   n_total / dt, ds, dc);
            fflush(stdout);
        }
    }
    const char *names[MODES] = {"posix_spawn", "clone", "clone, no O_TRUNC"};
    for (int m = 0; m < MODES; m++)
        printf("%-18s %6.0f/s  spawner %5.1f us  child %5.1f us\n", names[m], rate[m], self_us[m],
               kids_us[m]);
    return 0;
}
