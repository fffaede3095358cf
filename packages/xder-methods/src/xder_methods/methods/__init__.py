"""The methods, one module each (its config and its class, registered by name). Importing this
package registers every one; a method imports another method only as its base class."""

from xder_methods.methods import (  # noqa: F401  (each registers its method)
    agem,
    bic,
    der,
    derpp,
    derpp_ace,
    er,
    er_ace,
    ewc_on,
    fdr,
    flatness,
    gdumb,
    gem,
    gss,
    hal,
    icarl,
    joint,
    lucir,
    lwf,
    lwf_mc,
    rpc,
    sgd,
    si,
    xder,
)
