"""TODO: model"""
