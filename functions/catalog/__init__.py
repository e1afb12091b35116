"""The catalogs: pure tables and rules that the services, the adapters, infra/ and local mode all read.

Instance types and their prices, training shapes, the image allow-list grammar, how a cloud run is named
and tagged, what a cloud engine refuses, EventBridge sources and detail types, the bucket's data areas, the
quota grammar. No AWS call and no state here; below the services and adapters, beside `constants` and
`settings`, so infra/ never reaches into a service or an adapter for a table (an import contract holds it).
"""
