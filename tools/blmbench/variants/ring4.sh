#!/bin/sh
# The weight ring's depth set to 4.
printf '#define BLM_RING 4\n'; cat
