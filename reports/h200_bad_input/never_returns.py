import time

def build(device, precision):
    while True:
        time.sleep(0.1)
