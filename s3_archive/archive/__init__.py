"""TODO: archive"""
