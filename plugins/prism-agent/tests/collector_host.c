/* A host application for the collector tests. Usage: collector_host DIR MODE N
 *   kill     writes f-0..f-(N-1) (each closed), opens held-0..2 and writes them without
 *            closing, prints "ready" and waits to be killed.
 *   pause    writes a-0..a-(N-1), prints "half", waits for a line on stdin, writes
 *            b-0..b-(N-1), prints "done".
 *   threads  4 threads each write t<k>-0..t<k>-(N-1), 1 ms apart.
 *   fork     a child forked without exec writes child-0..child-(N-1) and exits; the parent
 *            writes parent-0..parent-(N-1), then waits for it.
 * File i of a series holds i + 1 bytes. Exits 2 on any failure. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *dir;
static int n;

static void fail(const char *what) {
    fprintf(stderr, "collector_host: %s (errno %d)\n", what, errno);
    exit(2);
}

static int make(const char *prefix, int i) {
    char path[4096], buf[4096];
    snprintf(path, sizeof path, "%s/%s-%d", dir, prefix, i);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) fail("open");
    size_t len = (size_t)i + 1 < sizeof buf ? (size_t)i + 1 : sizeof buf;
    memset(buf, 'x', len);
    if (write(fd, buf, len) != (ssize_t)len) fail("write");
    return fd;
}

static void series(const char *prefix, int usec) {
    for (int i = 0; i < n; i++) {
        if (close(make(prefix, i)) != 0) fail("close");
        if (usec) usleep(usec);
    }
}

static void *worker(void *arg) {
    char prefix[16];
    snprintf(prefix, sizeof prefix, "t%ld", (long)arg);
    series(prefix, 1000);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) return 1;
    dir = argv[1];
    n = atoi(argv[3]);
    const char *mode = argv[2];
    if (!strcmp(mode, "kill")) {
        series("f", 0);
        for (int i = 0; i < 3; i++) make("held", i);
        printf("ready\n");
        fflush(stdout);
        for (;;) pause();
    } else if (!strcmp(mode, "pause")) {
        series("a", 0);
        printf("half\n");
        fflush(stdout);
        char line[64];
        if (!fgets(line, sizeof line, stdin)) fail("stdin");
        series("b", 0);
        printf("done\n");
    } else if (!strcmp(mode, "threads")) {
        pthread_t th[4];
        for (long t = 0; t < 4; t++)
            if (pthread_create(&th[t], NULL, worker, (void *)t) != 0) fail("pthread_create");
        for (int t = 0; t < 4; t++) pthread_join(th[t], NULL);
    } else if (!strcmp(mode, "fork")) {
        pid_t pid = fork();
        if (pid < 0) fail("fork");
        if (pid == 0) {
            series("child", 0);
            exit(0);
        }
        series("parent", 0);
        int st;
        if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) fail("child");
    } else {
        return 1;
    }
    return 0;
}
