/* Host side of the example: load a plug-in .so through the installed
 * Tributary library and run it in a vec_env with a proportional controller,
 * printing one JSON line of episode statistics. */
#include <stdio.h>
#include <stdlib.h>

#include "envs/plugin.h"
#include "envs/vec_env.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: point_reach_run path/to/libpoint_reach.so\n");
        return 2;
    }
    struct env_plugin *p = env_plugin_open(argv[1]);
    if (!p) {
        fprintf(stderr, "point_reach_run: %s\n", env_last_error());
        return 1;
    }
    const struct env_spec *spec = env_plugin_spec(p);
    enum { B = 32 };
    struct vec_env *v = vec_env_new(spec, B, 1, 0);
    float obs[B * 3], act[B], reward[B];
    bool term[B], trunc[B];
    vec_env_reset(v, obs);
    for (int t = 0; t < 2000; t++) {
        for (int i = 0; i < B; i++)   /* push toward the target, brake on speed */
            act[i] = 2.0f * obs[i * 3 + 2] - 1.5f * obs[i * 3 + 1];
        vec_env_step(v, act, obs, reward, term, trunc, NULL);
    }
    struct vec_env_stats st;
    vec_env_get_stats(v, &st);
    printf("{\"env\":\"%s\",\"episodes\":%llu,\"return_mean\":%.6g,\"length_mean\":%.6g}\n",
           spec->id, (unsigned long long)st.episodes,
           st.episodes ? st.return_sum / (double)st.episodes : 0.0,
           st.episodes ? (double)st.length_sum / (double)st.episodes : 0.0);
    vec_env_free(v);
    env_plugin_close(p);
    return 0;
}
