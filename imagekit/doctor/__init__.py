"""The doctor: may this image use this host's GPUs?"""
