"""TODO: io"""
