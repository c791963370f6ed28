/* Writes files under the catalog agent and renames them the ways applications do: mkstemp +
 * write + close + rename (atomic writers), renames of open files, renames over recorded files,
 * renameat2 (RENAME_NOREPLACE, RENAME_EXCHANGE), renameat across directories, a directory
 * rename and a rename out of the tracked root.
 * Usage: rename_writer DIR OUTSIDE_DIR mkstemp|open|over|at2|dir.  The test creates
 * DIR/foreign.txt beforehand. Prints "ok" and exits 0 when every check held. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(const char *what) {
    fprintf(stderr, "rename_writer: %s (errno %d)\n", what, errno);
    exit(2);
}

static void fill(int fd, size_t n) {
    char buf[1000];
    memset(buf, 'r', sizeof buf);
    while (n > 0) {
        size_t k = n < sizeof buf ? n : sizeof buf;
        if (write(fd, buf, k) != (ssize_t)k) fail("write");
        n -= k;
    }
}

/* Create (truncate) `name` with `n` bytes and close it: recorded by the agent. */
static void make(const char *name, size_t n) {
    int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) fail(name);
    fill(fd, n);
    if (close(fd) != 0) fail("close");
}

/* Under the agent: the size of this process's catalog file (0 when there is none yet). */
static long catalog_size(void) {
    const char *dir = getenv("CATALOG_DIR");
    char host[256] = {0}, path[4096];
    struct stat st;
    if (!dir) return 0;
    if (gethostname(host, sizeof host - 1) != 0) strcpy(host, "localhost");
    snprintf(path, sizeof path, "%s/catalog.%s.%d.txt", dir, host, (int)getpid());
    return stat(path, &st) == 0 ? (long)st.st_size : 0;
}

/* rename, checking that a successful rename leaves errno alone. */
static void rename_ok(const char *from, const char *to) {
    errno = 4321;
    if (rename(from, to) != 0) fail("rename");
    if (errno != 4321) fail("rename changed errno");
}

static void mkstemp_case(void) {
    /* What atomic writers do: a temporary beside the target, written, closed, renamed. */
    char t[] = "out.bin.XXXXXX";
    int fd = mkstemp(t);
    if (fd < 0) fail("mkstemp");
    fill(fd, 5000);
    if (close(fd) != 0) fail("close tmp");
    rename_ok(t, "out.bin");
    /* The same through a path with `..` and a subdirectory. */
    if (mkdir("sub", 0755) != 0) fail("mkdir sub");
    char t2[] = "sub/part-XXXXXX";
    fd = mkostemp(t2, O_CLOEXEC);
    if (fd < 0) fail("mkostemp");
    fill(fd, 1234);
    if (close(fd) != 0) fail("close tmp2");
    char from[64];
    snprintf(from, sizeof from, "sub/../%s", t2);
    rename_ok(from, "sub/../sub/final.dat");
    /* A failing rename changes nothing and keeps libc's errno. */
    long before = catalog_size();
    errno = 0;
    if (rename("missing.bin", "nowhere.bin") != -1 || errno != ENOENT) fail("ENOENT expected");
    if (catalog_size() != before) fail("a failed rename wrote to the catalog");
}

static void open_case(void) {
    /* Renamed while open (never closed before): recorded at close under the new name. */
    int fd = open("a.bin", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) fail("open a.bin");
    fill(fd, 3000);
    rename_ok("a.bin", "renamed-open.bin");
    fill(fd, 1000);
    if (close(fd) != 0) fail("close a");
    /* Recorded once, opened again, renamed while open: the old name's entry goes. */
    make("b.bin", 100);
    fd = open("b.bin", O_WRONLY | O_APPEND);
    if (fd < 0) fail("open b.bin");
    fill(fd, 50);
    rename_ok("b.bin", "b2.bin");
    if (close(fd) != 0) fail("close b");
    /* A stdio stream renamed before fclose. */
    FILE *f = fopen("s.txt", "w");
    if (!f || fputs("stream data\n", f) < 0) fail("fopen s.txt");
    rename_ok("s.txt", "s-final.txt");
    if (fclose(f) != 0) fail("fclose");
}

static void over_case(void) {
    /* A recorded file replaced by a renamed temporary (smaller than the old one). */
    make("final.bin", 9000);
    char t[] = "final.bin.XXXXXX";
    int fd = mkstemp(t);
    if (fd < 0) fail("mkstemp");
    fill(fd, 2000);
    if (close(fd) != 0) fail("close tmp");
    rename_ok(t, "final.bin");
    /* A file the process did not write, renamed over one it recorded. */
    make("target.bin", 700);
    rename_ok("foreign.txt", "target.bin");
}

static void at2_case(void) {
    make("a.bin", 100);
    make("b.bin", 200);
    long before = catalog_size();
    errno = 0;
    if (renameat2(AT_FDCWD, "a.bin", AT_FDCWD, "b.bin", RENAME_NOREPLACE) != -1 || errno != EEXIST) fail("EEXIST expected");
    if (catalog_size() != before) fail("a failed renameat2 wrote to the catalog");
    errno = 4321;
    if (renameat2(AT_FDCWD, "a.bin", AT_FDCWD, "c.bin", RENAME_NOREPLACE) != 0 || errno != 4321) fail("renameat2 NOREPLACE");
    /* c.bin (100 bytes) and b.bin (200 bytes) swap names. */
    if (renameat2(AT_FDCWD, "c.bin", AT_FDCWD, "b.bin", RENAME_EXCHANGE) != 0) fail("renameat2 EXCHANGE");
    /* renameat between two directory descriptors. */
    if (mkdir("sub", 0755) != 0) fail("mkdir sub");
    int here = open(".", O_RDONLY | O_DIRECTORY), sub = open("sub", O_RDONLY | O_DIRECTORY);
    if (here < 0 || sub < 0) fail("open dirs");
    if (renameat(here, "b.bin", sub, "moved.bin") != 0) fail("renameat");
    close(here);
    close(sub);
}

static void dir_case(const char *outside) {
    if (mkdir("d", 0755) != 0) fail("mkdir d");
    make("d/x", 10);
    make("d/y", 20);
    int fd = open("d/z", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) fail("open d/z");
    fill(fd, 30);
    rename_ok("d", "e");
    fill(fd, 5);
    if (close(fd) != 0) fail("close z");
    /* Out of the root: its entry goes, nothing is recorded for it. */
    char to[4096];
    snprintf(to, sizeof to, "%s/x", outside);
    rename_ok("e/x", to);
}

int main(int argc, char **argv) {
    if (argc != 4) return 1;
    if (chdir(argv[1]) != 0) fail("chdir");
    if (strcmp(argv[3], "mkstemp") == 0) mkstemp_case();
    else if (strcmp(argv[3], "open") == 0) open_case();
    else if (strcmp(argv[3], "over") == 0) over_case();
    else if (strcmp(argv[3], "at2") == 0) at2_case();
    else if (strcmp(argv[3], "dir") == 0) dir_case(argv[2]);
    else return 1;
    puts("ok");
    return 0;
}
