-- One server, three databases: the Dagster instance, the lineage catalog, MLflow's runs.
CREATE DATABASE dagster;
CREATE DATABASE lineage;
CREATE DATABASE mlflow;
