"""The command line: `python -m training` and `python -m export`.

The one package that imports both `training` and `export`; the packages'
`__main__.py` entry scripts delegate to it.
"""
