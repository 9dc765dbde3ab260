#!/usr/bin/env python3
# lb4 then pf8.
import os, subprocess, sys
d = os.path.dirname(os.path.abspath(__file__))
a = subprocess.run([os.path.join(d, "lb4.py")], input=sys.stdin.buffer.read(), capture_output=True, check=True).stdout
b = subprocess.run([os.path.join(d, "pf8.py")], input=a, capture_output=True, check=True).stdout
sys.stdout.buffer.write(b)
