"""TODO: config"""
