/* Run files: no link followed, nothing but regular files read (runfile.h). */
#define _GNU_SOURCE
#include "runfiles/runfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runfiles/runfiles.h"

#define NOT_FOLLOWED "a run's files are never followed"

const char *runfile_kind(mode_t m)
{
    static const struct { mode_t type; const char *what; } kinds[] = {
        { S_IFLNK, "a symbolic link" },   { S_IFIFO, "a FIFO" },          { S_IFDIR, "a directory" },
        { S_IFSOCK, "a socket" },         { S_IFCHR, "a character device" }, { S_IFBLK, "a block device" },
        { S_IFREG, "a regular file" },
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if ((m & S_IFMT) == kinds[i].type) return kinds[i].what;
    return "not a file of a known kind";
}

/* The reason a file of mode m is refused where `want` (S_IFREG or S_IFDIR)
 * is expected, into why; -1, or 0 when it is what is wanted. */
static int refuse(mode_t m, mode_t want, char *why, size_t cap)
{
    if ((m & S_IFMT) == want) return 0;
    if (S_ISLNK(m))
        snprintf(why, cap, "is a symbolic link%s: " NOT_FOLLOWED, want == S_IFDIR ? ", not a directory" : "");
    else
        snprintf(why, cap, "is %s, not %s", runfile_kind(m), want == S_IFDIR ? "a directory" : "a regular file");
    return -1;
}

static int check(const char *path, mode_t want)
{
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : runfiles_set_error("%s: %s", path, strerror(errno));
    char why[160];
    if (refuse(st.st_mode, want, why, sizeof why) != 0) return runfiles_set_error("%s: %s", path, why);
    return 0;
}

int runfile_check_file(const char *path) { return check(path, S_IFREG); }

int runfile_check_dir(const char *path) { return check(path, S_IFDIR); }

int runfile_open_read(const char *path, bool nofollow, char *why, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | (nofollow ? O_NOFOLLOW : 0));
    if (fd < 0) {
        int e = errno;
        struct stat st;
        /* O_NOFOLLOW's ELOOP: said as what it is */
        if (nofollow && e == ELOOP && lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) refuse(st.st_mode, S_IFREG, why, cap);
        else snprintf(why, cap, "%s", strerror(e));
        errno = e;
        return -1;
    }
    struct stat st;
    int e = fstat(fd, &st) != 0 ? errno : 0;
    if (e) snprintf(why, cap, "%s", strerror(e));
    else if (refuse(st.st_mode, S_IFREG, why, cap) != 0) e = EINVAL;
    if (e) {
        close(fd);
        errno = e;
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}
