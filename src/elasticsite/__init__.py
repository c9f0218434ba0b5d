"""elasticsite: extend a batch cluster into IaaS clouds on demand.

Importing the package is cheap on purpose: worker processes of the embedded site
import only what they use.
"""

__version__ = "0.1.0"
