#!/usr/bin/env python3
# tgpf.py and lb4.py together.
import os, subprocess, sys
d = os.path.dirname(os.path.abspath(__file__))
s = subprocess.run([os.path.join(d, "tgpf.py")], input=sys.stdin.read(), capture_output=True, text=True, check=True).stdout
sys.stdout.write(subprocess.run([os.path.join(d, "lb4.py")], input=s, capture_output=True, text=True, check=True).stdout)
