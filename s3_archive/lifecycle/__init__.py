"""TODO: lifecycle"""
