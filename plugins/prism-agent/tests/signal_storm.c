/* A host whose signal handlers write files while its threads write theirs, for the catalog
 * agent's tests. Usage: signal_storm DIR N.
 *
 * The main thread and a writer thread each write N files (m-I.bin and t-I.bin, I+1 bytes)
 * with open, write and close. Meanwhile SIGALRM (setitimer, every 1 ms) and SIGUSR1 (sent
 * to the main thread by a third thread every 0.5 ms) interrupt them; each handler opens and
 * closes /dev/null and, for the first MAX_HANDLER_FILES signals (so that a slow machine does
 * not make a run long), opens, writes and closes a file of its own (h-K.bin, 3 bytes).
 * Prints "ok" and exits 0 when every call returned what plain libc returns. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define MAX_HANDLER_FILES 300

static char dir[4096];
static size_t dir_len;
static int handler_files;
static volatile int handler_failed;
static volatile int stop;

/* Async-signal-safe: builds DIR/h-K.bin by hand. */
static void handler(int sig) {
    (void)sig;
    int saved = errno;
    int null = open("/dev/null", O_RDONLY);
    if (null < 0 || close(null) != 0) handler_failed = 1;
    int k = __atomic_fetch_add(&handler_files, 1, __ATOMIC_RELAXED);
    if (k >= MAX_HANDLER_FILES) {
        errno = saved;
        return;
    }
    char p[4200];
    memcpy(p, dir, dir_len);
    size_t n = dir_len;
    memcpy(p + n, "/h-", 3);
    n += 3;
    char digits[16];
    int d = 0;
    do {
        digits[d++] = (char)('0' + k % 10);
        k /= 10;
    } while (k > 0);
    while (d > 0) p[n++] = digits[--d];
    memcpy(p + n, ".bin", 5);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, "sig", 3) != 3 || close(fd) != 0) handler_failed = 1;
    errno = saved;
}

static void write_files(const char *prefix, int n) {
    char buf[1024];
    memset(buf, 'x', sizeof buf);
    for (int i = 0; i < n; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%s-%d.bin", dir, prefix, i);
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) {
            perror("open");
            exit(2);
        }
        if (write(fd, buf, (size_t)(i % 1024) + 1) != (ssize_t)(i % 1024) + 1) {
            perror("write");
            exit(2);
        }
        errno = EDOM;
        if (close(fd) != 0 || errno != EDOM) {
            fprintf(stderr, "close: rc or errno changed\n");
            exit(2);
        }
    }
}

static int per_thread;

static void *writer(void *arg) {
    (void)arg;
    write_files("t", per_thread);
    return NULL;
}

static void *sender(void *arg) {
    pthread_t main_thread = *(pthread_t *)arg;
    struct timespec ts = {0, 500000};
    while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
        pthread_kill(main_thread, SIGUSR1);
        nanosleep(&ts, NULL);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) return 1;
    dir_len = strlen(argv[1]);
    if (dir_len >= sizeof dir) return 1;
    memcpy(dir, argv[1], dir_len + 1);
    per_thread = atoi(argv[2]);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGALRM, &sa, NULL) != 0 || sigaction(SIGUSR1, &sa, NULL) != 0) return 3;
    /* Only the main thread takes the signals: the other threads block them. */
    sigset_t both;
    sigemptyset(&both);
    sigaddset(&both, SIGALRM);
    sigaddset(&both, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &both, NULL);
    pthread_t self = pthread_self(), w, s;
    if (pthread_create(&w, NULL, writer, NULL) != 0 || pthread_create(&s, NULL, sender, &self) != 0) return 3;
    pthread_sigmask(SIG_UNBLOCK, &both, NULL);

    struct itimerval it = {{0, 1000}, {0, 1000}};
    if (setitimer(ITIMER_REAL, &it, NULL) != 0) return 3;
    write_files("m", per_thread);
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    pthread_join(w, NULL);
    pthread_join(s, NULL);
    if (handler_failed) {
        fprintf(stderr, "a handler's open, write or close failed\n");
        return 4;
    }
    printf("ok\n");
    return 0;
}
