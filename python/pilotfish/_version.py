"""The package's version, in a module of its own: the client reads it without importing the
package's __init__ (which imports the client).
"""

__version__ = "0.1.0"
