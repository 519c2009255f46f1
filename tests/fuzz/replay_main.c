/* Replays a fuzz target's corpus as an ordinary test, with any compiler:
 * every file under the directories (or the files) named on the command
 * line goes to LLVMFuzzerTestOneInput, in name order, as libFuzzer would
 * feed it. Fails when it finds no input at all. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    size_t got = n > 0 ? fread(buf, 1, (size_t)n, f) : 0;
    fclose(f);
    LLVMFuzzerTestOneInput(buf, got);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int files = 0;
    for (int a = 1; a < argc; a++) {
        struct stat st;
        if (stat(argv[a], &st) != 0) {
            perror(argv[a]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (run_file(argv[a]) < 0) return 1;
            files++;
            continue;
        }
        struct dirent **names;
        int k = scandir(argv[a], &names, NULL, alphasort);
        if (k < 0) {
            perror(argv[a]);
            return 1;
        }
        for (int i = 0; i < k; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[a], names[i]->d_name);
            if (names[i]->d_name[0] != '.' && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
                if (run_file(path) < 0) return 1;
                files++;
            }
            free(names[i]);
        }
        free(names);
    }
    printf("%s: %d inputs replayed\n", argv[0], files);
    return files > 0 ? 0 : 1;
}
