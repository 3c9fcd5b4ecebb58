"""TODO: keys"""
