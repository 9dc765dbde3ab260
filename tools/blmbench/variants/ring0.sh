#!/bin/sh
# The weight ring's depth set to 0 (0: the register prefetch one quad-step ahead).
printf '#define BLM_RING 0\n'; cat
