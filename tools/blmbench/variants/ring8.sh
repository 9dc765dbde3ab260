#!/bin/sh
# The weight ring's depth set to 8 (0: the register prefetch one quad-step ahead).
printf '#define BLM_RING 8\n'; cat
