"""WebShop: only the prompt format exists so far; no environment is
registered, so ``env.name: webshop`` is rejected until it arrives."""
