"""TODO: restore"""
