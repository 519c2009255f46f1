/* What the files of the run configuration share (config.c, config_wire.c);
 * not installed. */
#ifndef TRIB_RL_CONFIG_INTERNAL_H
#define TRIB_RL_CONFIG_INTERNAL_H

#include "rl/config.h"

/* Sets *c to the defaults every preset starts from (no preset name). */
void rl_config_base(struct rl_config *c);

#endif
