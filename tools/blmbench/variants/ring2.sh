#!/bin/sh
# The weight ring's depth set to 2 (0: the register prefetch one quad-step ahead).
printf '#define BLM_RING 2\n'; cat
