"""TODO: catalog"""
